"""Small real parts for the recipes: datasets, a model and an example custom batch sampler."""

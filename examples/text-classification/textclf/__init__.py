"""A tiny text classifier trained by a composer-sampling recipe: its own data, collate function and model."""

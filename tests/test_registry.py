"""Recipes name their parts by registered name or import target: every way that can go wrong is a named error."""

from __future__ import annotations

from pathlib import Path

import composer.callbacks
import pytest
from torch.utils.data import ConcatDataset

from composer_sampling.recipes import registry
from composer_sampling.recipes.build_data import build_data
from composer_sampling.recipes.build_training import build_model, build_optimizer, build_run
from composer_sampling.recipes.checks import check_spec
from composer_sampling.recipes.dry_run import plan_recipe
from composer_sampling.recipes.models import IndexedClassifier
from composer_sampling.recipes.registry import CALLBACKS, Registry, RegistryError
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.runner import main as train_main
from composer_sampling.recipes.schema import RecipeError, load_recipe

from user_parts import Numbers

NUMBERS = 'train_loader.dataset={target: "user_parts:numbers", kwargs: {size: 200}}'


def _spec(path, overrides):
    return resolve(load_recipe(path, overrides))


def _datasets(recipe):
    spec = resolve(recipe)
    data = build_data(spec, check_spec(spec, 1).plan)
    return data.train, data.held_out


def _check(*overrides: str, world_size: int = 1) -> None:
    check_spec(resolve(load_recipe(None, list(overrides))), world_size)


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['train_loader.dataset.name=imagenet'], "train_loader.dataset.name: 'imagenet' is not a registered dataset; "
                                                 'choose one of: digits, synthetic'),
        (['train_loader.sampler.name=fancy'], "train_loader.sampler.name: 'fancy' is not a registered sampler"),
        (['model.name=resnet'], "model.name: 'resnet' is not a registered model; choose one of: mlp"),
        (['optimizer.name=lion'], "optimizer.name: 'lion' is not a registered optimizer; choose one of: adamw, sgd"),
        (['train_loader.collate_fn={name: pad}'], "train_loader.collate_fn.name: 'pad' is not a registered collate_fn"),
        (['callbacks.fancy={}'], "callbacks.fancy: 'fancy' is not a registered callback"),
        (['model={name: mlp, target: "user_parts:linear"}'], "model gives both name='mlp' and target="),
        (['model.target=user_parts.linear'], "model.target must look like 'package.module:callable'"),
        (['model={target: "user_parts:linear", hidden_size: 3}'], 'model.hidden_size applies to the name form only'),
        (['train_loader.dataset={target: "user_parts:numbers", eval_fraction: 0.3}'],
         'train_loader.dataset.eval_fraction: with target, the only other key is kwargs; set the held-out fraction '
         'as eval_loader.eval_fraction'),
        (['train_loader.sampler.num_batches=2'], 'train_loader.sampler.num_batches does not apply to the resumable '
                                                 'sampler (it takes: shuffle, drop_last)'),
        (['train_loader.dataset.size=10'], 'train_loader.dataset.size does not apply to the digits dataset'),
        (['train_loader.sampler.name=sub_epoch'], 'train_loader.sampler.sub_epochs_per_epoch is required for the '
                                                  'sub_epoch sampler'),
        (['callbacks={mine: {target: "user_parts:linear", classes: 3}}'],
         'callbacks.mine has target, so its only other key is kwargs; got classes'),
        (['callbacks={mine: {target: "not a target"}}'], "callbacks.mine.target must look like 'package.module"),
        (['eval_loader.eval_fraction=0.3', 'train_loader.dataset.eval_fraction=0.2'],
         'eval_loader.eval_fraction and train_loader.dataset.eval_fraction both set the held-out fraction'),
    ],
)
def test_schema_refuses_a_part_it_cannot_build(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError) as error:
        load_recipe(None, overrides)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['model.target=no_such_package.models:build'], "model: target 'no_such_package.models:build': cannot import "
                                                        'no_such_package.models'),
        (['model.target=user_parts:missing'],
         "model: target 'user_parts:missing': user_parts has no attribute missing"),
        (['model.target=user_parts:NOT_CALLABLE'], "model: target 'user_parts:NOT_CALLABLE' is a int, not a callable"),
        (['model={target: "user_parts:linear", kwargs: {clases: 3}}'],
         "model: the model linear: unexpected keyword 'clases'; it takes: classes, with_num_classes"),
        (['train_loader.dataset.kwargs={sise: 3}'],
         "train_loader.dataset: the dataset numbers: unexpected keyword 'sise'; it takes: size, classes"),
        (['model.target=user_parts:numbers'],
         "model: the model numbers: missing required keyword 'size'; it takes: size, classes"),
        (['train_loader.sampler={target: "user_parts:numbers"}'],
         "train_loader.sampler: the sampler numbers: unexpected keyword 'dataset'"),
        (['optimizer={target: "torch.optim:AdamW", kwargs: {learning_rate: 0.1}}'],
         "optimizer: the optimizer AdamW: unexpected keyword 'learning_rate'"),
        (['train_loader.collate_fn={target: "user_parts:not_a_dataset"}'],
         'train_loader.collate_fn: the collate fn not_a_dataset: too many positional arguments; it takes: none'),
        (['callbacks.lr_monitor={window: 3}'], "callbacks.lr_monitor: the lr monitor LRMonitor: unexpected keyword "
                                               "'window'"),
        (['callbacks={mine: {target: "user_parts:nothing_here"}}'],
         "callbacks.mine: target 'user_parts:nothing_here': user_parts has no attribute nothing_here"),
    ],
)
def test_builders_are_checked_against_their_signatures_before_anything_is_built(overrides: list[str],
                                                                                 message: str) -> None:
    reads = Numbers.reads
    with pytest.raises(RecipeError) as error:
        _check(NUMBERS, *overrides)
    assert message in str(error.value)
    assert Numbers.reads == reads


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['train_loader.dataset.target=user_parts:not_a_dataset'],
         'train_loader.dataset: the builder returned a int; a recipe trains on a map-style dataset with a length'),
        (['train_loader.dataset.target=user_parts:three_sources'],
         "train_loader.dataset: the builder returned 3 datasets, the sources of a mixture, but train_loader.sampler "
         "is 'resumable'; use train_loader.sampler.name: mixture"),
        (['train_loader.dataset.target=user_parts:three_sources', 'train_loader.sampler.name=mixture',
          'train_loader.sampler.source_fractions=[0.5,0.5]'],
         'train_loader.sampler.source_fractions cuts one dataset into sources, but the train_loader.dataset builder '
         'returned 3 of them'),
        ([NUMBERS, 'train_loader.sampler.name=mixture'],
         'train_loader.sampler.source_fractions is required for the mixture sampler when the train_loader.dataset '
         'builder returns one dataset'),
        (['train_loader.dataset={target: "user_parts:three_sources", kwargs: {sizes: [600, 20]}}',
          'train_loader.sampler.name=mixture'],
         'train_loader.dataset: source 1 holds 16 of the 496 train samples, fewer than one global step of 64'),
    ],
)
def test_what_a_dataset_builder_returns_is_checked(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError) as error:
        _check(*overrides)
    assert message in str(error.value)


def test_a_list_of_datasets_becomes_the_sources_of_a_mixture() -> None:
    recipe = load_recipe(None, ['train_loader.dataset.target=user_parts:three_sources',
                                'train_loader.sampler.name=mixture'])
    train, held_out = _datasets(recipe)
    assert isinstance(train, ConcatDataset)
    assert [len(source) for source in train.datasets] == [480, 320, 240]  # 0.2 of each source held out
    assert len(held_out) == 120 + 80 + 60
    report = plan_recipe(recipe, world_size=4, epochs=1)
    assert report.ok, report.problems
    assert [row['size'] for row in report.sources] == [480, 320, 240]


def test_eval_loader_dataset_replaces_the_held_out_split() -> None:
    recipe = load_recipe(None, [NUMBERS, 'eval_loader.dataset={target: "user_parts:numbers", kwargs: {size: 30}}'])
    train, held_out = _datasets(recipe)
    assert (len(train), len(held_out)) == (200, 30)
    with pytest.raises(RecipeError, match=r'eval_loader\.eval_fraction cuts the held-out split from the train dataset, '
                                          r'but eval_loader\.dataset gives one of its own'):
        load_recipe(None, [NUMBERS, 'eval_loader.dataset={target: "user_parts:numbers", kwargs: {size: 30}}',
                           'eval_loader.eval_fraction=0.1'])


def test_the_held_out_split_renumbers_dict_indices_to_positions_in_the_split() -> None:
    train, held_out = _datasets(load_recipe(None, [NUMBERS]))
    assert (len(train), len(held_out)) == (160, 40)
    assert held_out[0]['index'] == 0 and held_out[0]['input'][0] == 160 % 2  # sample 160 of the dataset


def test_a_plain_module_is_wrapped_and_needs_num_classes() -> None:
    model = build_model(_spec(None, ['model={target: "user_parts:linear", kwargs: {classes: 3}}']))
    assert isinstance(model, IndexedClassifier) and model.num_classes == 3
    with pytest.raises(RecipeError, match='without an integer num_classes attribute'):
        build_model(_spec(None, ['model={target: "user_parts:linear", kwargs: {with_num_classes: false}}']))
    with pytest.raises(RecipeError, match=r'model: user_parts:numbers returned a Numbers; return a '
                                          r'composer\.models\.ComposerModel'):
        build_model(_spec(None, ['model={target: "user_parts:numbers", kwargs: {size: 3}}']))


def test_the_optimizer_builder_gets_the_parameters_and_must_return_an_optimizer() -> None:
    model = build_model(_spec(None, []))
    sgd = build_optimizer(_spec(None, ['optimizer.name=sgd', 'optimizer.lr=0.5']), model)
    assert sgd.defaults['lr'] == 0.5 and sgd.defaults['momentum'] == 0.9
    with pytest.raises(RecipeError, match=r'optimizer: the builder returned a str, not a torch\.optim\.Optimizer'):
        build_optimizer(_spec(None, ['optimizer.target=user_parts:not_an_optimizer']), model)


def test_a_sampler_builder_must_return_a_sampler() -> None:
    with pytest.raises(RecipeError, match=r'train_loader\.sampler: the builder returned a int; return a sampler, a '
                                          r'batch sampler or a DataLoader'):
        build_run(_spec(None, [NUMBERS, 'train_loader.sampler.target=user_parts:junk_sampler']), 1, 0)


def test_a_bad_part_exits_2_before_training(capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main(['yamls/digits.yaml', 'model.target=no_such_package:build']) == 2
    assert "error: model: target 'no_such_package:build': cannot import no_such_package" in capsys.readouterr().err


def test_every_composer_callback_is_registered_by_name() -> None:
    targets = {entry_point.split(':')[1] for entry_point in (CALLBACKS.entry(name).target for name in CALLBACKS.names())
               if entry_point.startswith('composer.callbacks:')}
    assert targets == set(composer.callbacks.__all__)
    for name in CALLBACKS.names():
        CALLBACKS.get(name)  # each imports


def _install_entry_points(folder: Path, group: str, lines: list[str]) -> None:
    info = folder / 'user_parts_pkg-1.0.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: user-parts-pkg\nVersion: 1.0\n')
    (info / 'entry_points.txt').write_text(f'[{group}]\n' + '\n'.join(lines) + '\n')


def test_entry_points_register_parts_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_entry_points(tmp_path, 'composer_sampling.datasets', ['numbers = user_parts:numbers'])
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = Registry('datasets', 'composer_sampling.datasets', dict(registry.DATASETS._entries))
    monkeypatch.setattr(registry, 'DATASETS', fresh)
    monkeypatch.setitem(registry.REGISTRIES, 'datasets', fresh)
    import composer_sampling.recipes.build as build

    monkeypatch.setitem(build._TABLES, 'train_loader.dataset', fresh)
    assert 'numbers' in fresh.names()
    recipe = load_recipe(None, ['train_loader.dataset={name: numbers, kwargs: {size: 120}}'])
    train, _ = _datasets(recipe)
    assert len(train) == 96
    with pytest.raises(RegistryError, match="'nothing' is not a registered dataset; choose one of: digits, "
                                            'synthetic, numbers'):
        fresh.entry('nothing')


def test_a_registered_part_gets_the_recipes_values_of_its_options_defaults_included() -> None:
    model = build_model(_spec(None, []))
    adamw = build_optimizer(_spec(None, []), model)
    assert (adamw.defaults['lr'], adamw.defaults['weight_decay']) == (0.003, 0.0)  # not AdamW's own 0.001 and 0.01
    tuned = build_optimizer(_spec(None, ['optimizer.lr=0.02', 'optimizer.kwargs={betas: [0.8, 0.9]}']), model)
    assert tuned.defaults['lr'] == 0.02 and tuple(tuned.defaults['betas']) == (0.8, 0.9)


@pytest.mark.parametrize('overrides', [
    ['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.5,0.3,0.2]'],  # digits, cut
    [NUMBERS],
])
def test_batches_carry_the_positions_the_sampler_draws(overrides: list[str]) -> None:
    from torch.utils.data import DataLoader

    train, _ = _datasets(load_recipe(None, overrides))
    drawn = [0, 1, len(train) // 2, len(train) - 2, len(train) - 1]  # across every source of a mixture
    batch = next(iter(DataLoader(train, batch_size=len(drawn), sampler=drawn)))  # the DataLoader's batched reads
    assert batch['index'].tolist() == drawn  # what SampleLedger(index_key='index') records


def test_a_concat_dataset_from_a_builder_is_one_dataset() -> None:
    train, held_out = _datasets(load_recipe(None, ['train_loader.dataset.target=user_parts:concatenated']))
    assert (len(train), len(held_out)) == (160, 40)
    assert plan_recipe(load_recipe(None, ['train_loader.dataset.target=user_parts:concatenated']), 2, 1).ok

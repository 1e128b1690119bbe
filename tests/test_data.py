import pytest
import torch

from harness import data


def test_same_seed_gives_bit_identical_data():
    a, b = data.make_dataset(64, seed=3), data.make_dataset(64, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    c = data.make_dataset(64, seed=4)
    assert not torch.equal(a.images, c.images)


def test_dataset_has_the_cifar_shape_and_balanced_labels():
    ds = data.make_dataset(100, seed=0)
    assert ds.images.shape == (100, 3, 32, 32) and ds.images.dtype == torch.float32
    assert ds.labels.dtype == torch.int64 and len(ds) == 100
    assert torch.bincount(ds.labels, minlength=10).tolist() == [10] * 10


def test_data_does_not_touch_the_global_generator():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    data.make_dataset(16, seed=1)
    list(data.batches(data.make_dataset(16, seed=1), 4, 3, seed=0))
    assert torch.equal(torch.rand(3), expected)


def test_splits_share_templates_and_are_learnable_by_nearest_template():
    train, test = data.make_splits(200, 200, seed=0, noise=1.0)
    assert not torch.equal(train.images[:10], test.images[:10])
    templates = data.class_templates()
    scores = torch.einsum("nchw,kchw->nk", test.images, templates)
    accuracy = float((scores.argmax(1) == test.labels).float().mean())
    assert accuracy > 0.9  # learnable: the templates carry the label


def test_templates_are_flip_invariant():
    templates = data.class_templates()
    assert torch.allclose(templates, templates.flip(-1))


def _params(n, top, left, flip):
    return data.AugmentParams(torch.full((n,), top), torch.full((n,), left),
                              torch.full((n,), flip, dtype=torch.bool))


def test_centre_crop_without_flip_is_the_identity():
    images = data.make_dataset(4, seed=0).images
    assert torch.equal(data.apply_augment(images, _params(4, 4, 4, False)), images)


def test_flip_mirrors_the_width():
    images = data.make_dataset(4, seed=0).images
    assert torch.equal(data.apply_augment(images, _params(4, 4, 4, True)), images.flip(-1))


def test_crop_shifts_and_pads_with_zeros():
    images = data.make_dataset(2, seed=0).images
    out = data.apply_augment(images, _params(2, 0, 8, False))  # 4 up, 4 left of centre
    assert torch.equal(out[:, :, 4:, :28], images[:, :, :28, 4:])
    assert out[:, :, :4].abs().max() == 0 and out[:, :, :, 28:].abs().max() == 0


def test_augment_is_reproducible_and_varies_per_sample():
    images = data.make_dataset(32, seed=0).images
    a = data.augment(images, torch.Generator().manual_seed(5))
    b = data.augment(images, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    params = data.draw_augment_params(256, torch.Generator().manual_seed(5))
    assert 0.3 < params.flip.float().mean() < 0.7
    assert params.top.min() == 0 and params.top.max() == 8


def test_augment_output_does_not_depend_on_the_images_dtype_path():
    # indexing only: augmenting bf16 images equals augmenting fp32 ones then casting
    images = data.make_dataset(8, seed=2).images
    a = data.augment(images.bfloat16(), torch.Generator().manual_seed(1))
    b = data.augment(images, torch.Generator().manual_seed(1)).bfloat16()
    assert torch.equal(a, b)


def test_augment_refuses_a_device_generator():
    class FakeGen:
        device = torch.device("meta")
    with pytest.raises(ValueError, match="CPU torch.Generator"):
        data.draw_augment_params(4, FakeGen())


def test_batches_are_deterministic_and_cover_epochs():
    ds = data.make_dataset(20, seed=0)
    first = list(data.batches(ds, 8, 5, seed=1))
    second = list(data.batches(ds, 8, 5, seed=1))
    assert len(first) == 5
    for (xa, ya), (xb, yb) in zip(first, second):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    plain = list(data.batches(ds, 10, 2, seed=1, augmentation=False))
    seen = torch.cat([y for _, y in plain])
    assert sorted(seen.tolist()) == sorted(ds.labels.tolist())  # one epoch, no repeats


def test_batches_reject_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size"):
        list(data.batches(data.make_dataset(4, seed=0), 8, 1, seed=0))


def test_make_dataset_rejects_empty():
    with pytest.raises(ValueError, match="positive"):
        data.make_dataset(0, seed=0)

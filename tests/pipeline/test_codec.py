import numpy as np
import pytest
import torch
from PIL import Image

from seneca.pipeline import codec
from seneca_base.errors import CodecError, SenecaError

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
]
SHAPES = [(), (0,), (7,), (3, 224, 224), (2, 3, 4, 5), (1, 0, 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_tensor_round_trip(dtype, shape):
    t = (torch.rand(shape) * 100).to(dtype)
    back = codec.decode(codec.encode(t))
    assert back.dtype == dtype and tuple(back.shape) == shape
    assert torch.equal(back, t)


def test_non_contiguous_and_numpy_inputs():
    t = torch.arange(24, dtype=torch.int32).reshape(4, 6).t()
    assert torch.equal(codec.decode(codec.encode(t)), t)
    a = np.arange(10, dtype=np.float32)[::2]
    back = codec.decode(bytearray(codec.encode(a)))
    assert isinstance(back, np.ndarray) and back.dtype == a.dtype and np.array_equal(back, a)
    assert back.flags.writeable  # a view of the (writable) reply buffer


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float64, np.bool_, np.uint16])
def test_arrays_come_back_as_arrays_of_their_dtype(dtype):
    a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    back = codec.decode(codec.encode(a), expect=codec.Kind.ARRAY)
    assert back.dtype == a.dtype and back.shape == a.shape and np.array_equal(back, a)


def test_values_without_a_faithful_copy_are_refused():
    big_endian = np.arange(3, dtype=">f4")  # as a loader reads a big-endian file's numbers
    for value in (
        np.array(["x"]),
        np.ones(2, dtype=np.complex64),
        Image.new("F", (2, 2)),
        big_endian,
    ):
        with pytest.raises(CodecError):
            codec.encode(value)


def _random_image(mode, seed):
    rng = np.random.default_rng(seed)
    shape = (5, 7) if mode == "L" else (5, 7, len(mode))
    return Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8))


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_image_round_trip(mode):
    img = _random_image(mode, 0)
    back = codec.decode(codec.encode(img), expect=codec.Kind.IMAGE)
    assert back.mode == mode and back.size == img.size
    assert np.array_equal(np.asarray(back), np.asarray(img))


def test_torchvisions_tensor_types_are_kept():
    """A ``tv_tensors.Image`` (as ``ToImage`` makes), ``Video`` or ``Mask`` comes back as one,
    laid out as a TENSOR (read into a batch's rows as one is); a type holding more than its
    values (``BoundingBoxes``' format and canvas) is refused."""
    from torchvision import tv_tensors

    for cls in (tv_tensors.Image, tv_tensors.Video, tv_tensors.Mask, torch.Tensor):
        t = torch.arange(24, dtype=torch.uint8).view(2, 3, 4).as_subclass(cls)
        value = codec.encode(t)
        back = codec.decode(value)
        assert type(back) is cls and torch.equal(back.as_subclass(torch.Tensor), t)
        header = value[: codec.tensor_header_size(value)]
        assert codec.tensor_layout(header, len(value)) == (torch.uint8, (2, 3, 4))
    boxes = tv_tensors.BoundingBoxes([[0, 0, 2, 2]], format="XYXY", canvas_size=(4, 4))
    with pytest.raises(CodecError, match="BoundingBoxes"):
        codec.encode(boxes)


def test_an_image_keeps_its_info():
    """What a transform may read besides the pixels: EXIF and ICC bytes, the resolution (an
    ``IFDRational`` where it came from EXIF), a JPEG's Photoshop blocks (a dict of int keys).
    Its decoder's format is not: an image made from the cached pixels has none, as the copy
    torchvision's ``pil_loader`` gives has none."""
    import io

    from PIL.TiffImagePlugin import IFDRational

    img = _random_image("RGB", 2)
    img.info.update(
        {
            "exif": b"Exif\0\0MM\0*",
            "icc_profile": bytes(range(256)),
            "dpi": (IFDRational(72, 1), IFDRational(300, 0)),
            "jfif_density": (1, 1),
            "photoshop": {1028: b"\x1c\x02", 1061: b""},
            "gamma": 0.45455,
            "comment": "caf\u00e9 \ud800",
            "layers": [None, True, 3, -0.0],
        }
    )
    back = codec.decode(codec.encode(img))
    assert back.info.keys() == img.info.keys()
    assert {k: v for k, v in back.info.items() if k != "dpi"} == {
        k: v for k, v in img.info.items() if k != "dpi"
    }
    for got, want in zip(back.info["dpi"], img.info["dpi"], strict=True):  # NaN for 300/0
        assert isinstance(got, IFDRational)
        assert (got.numerator, got.denominator) == (want.numerator, want.denominator)
    assert type(back.info["layers"]) is list and type(back.info["jfif_density"]) is tuple
    plain = codec.decode(codec.encode(_random_image("L", 3)))
    assert plain.info == {} and plain.format is None
    saved = io.BytesIO()
    _random_image("RGB", 6).save(saved, format="JPEG", dpi=(300, 300))
    jpeg = Image.open(saved)
    from_file = codec.decode(codec.encode(jpeg))
    assert jpeg.format == "JPEG" and from_file.format is None
    assert from_file.info["dpi"] == jpeg.info["dpi"] == (300, 300)
    assert codec.decode(codec.encode(img), image_tensor=True).shape == (3, 5, 7)


def test_an_image_whose_info_cannot_be_kept_is_refused():
    img = _random_image("RGB", 4)
    img.info["xmp"] = {"nested": [object()]}
    with pytest.raises(CodecError, match="info holds a object"):
        codec.encode(img)
    value = bytearray(codec.encode(_random_image("RGB", 4)))
    value[-2:] = b"{]"  # its metadata damaged
    with pytest.raises(CodecError, match="metadata"):
        codec.decode(value)
    value = bytearray(codec.encode(_random_image("L", 5)))
    assert value.endswith(b'{"d": []}')
    value[-9:] = b"[1,2,3,4]"  # JSON, but no info dict there
    with pytest.raises(CodecError, match="metadata"):
        codec.decode(value)


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_image_chw_value_equals_pil_to_tensor(mode):
    from torchvision.transforms.v2.functional import pil_to_tensor

    img = _random_image(mode, 1)
    back = codec.decode(codec.encode_image_chw(img), expect=codec.Kind.TENSOR)
    want = pil_to_tensor(img)
    assert back.is_contiguous() and back.dtype == torch.uint8 and torch.equal(back, want)


def test_image_chw_value_only_for_byte_modes():
    assert codec.encode_image_chw(Image.new("F", (3, 2))) is None
    assert codec.encode_image_chw(Image.new("I;16", (3, 2))) is None


def test_raw_bytes_round_trip_is_a_view():
    value = codec.encode(b"\xff\xd8jpeg bytes")
    view = codec.decode(value, expect=codec.Kind.RAW)
    assert isinstance(view, memoryview) and bytes(view) == b"\xff\xd8jpeg bytes"
    assert view.obj is value


def test_tensor_decode_is_zero_copy():
    buf = bytearray(codec.encode(torch.zeros(4, dtype=torch.float32)))
    t = codec.decode(buf)
    buf[-4:] = np.float32(2.5).tobytes()  # write through the buffer ...
    assert t[-1].item() == 2.5  # ... and the tensor sees it: no copy was made


def test_payload_is_8_byte_aligned():
    for ndim in range(0, 6):
        value = codec.encode(torch.zeros((1,) * ndim, dtype=torch.float64))
        assert (len(value) - 8) % 8 == 0


def test_truncated_values():
    value = codec.encode(torch.arange(10))
    for cut in (0, 3, 8, len(value) - 1):
        with pytest.raises(CodecError, match="truncated"):
            codec.decode(value[:cut])


def test_foreign_value():
    with pytest.raises(CodecError, match="foreign"):
        codec.decode(b"\x80\x04\x95pickle-like" + bytes(40))


def test_other_format_version():
    value = bytearray(codec.encode(torch.arange(3)))
    value[4] = codec.FORMAT_VERSION + 1
    with pytest.raises(CodecError, match="format version"):
        codec.decode(bytes(value))


def test_mismatched_length_and_kind():
    value = codec.encode(torch.arange(3))
    with pytest.raises(CodecError, match="mismatched"):
        codec.decode(value + b"\0" * 8)
    with pytest.raises(CodecError, match="expected a IMAGE"):
        codec.decode(value, expect=codec.Kind.IMAGE)


def test_errors_are_seneca_errors_and_unencodable_types():
    assert issubclass(CodecError, SenecaError)
    with pytest.raises(CodecError, match="cannot encode"):
        codec.encode({"a": 1})
    with pytest.raises(CodecError, match="dtype"):
        codec.encode(torch.zeros(2, dtype=torch.complex64))


def test_values_are_writable_and_a_read_only_one_is_copied_for_a_tensor():
    t = torch.arange(6, dtype=torch.int32).view(2, 3)
    value = codec.encode(t)
    assert isinstance(value, bytearray)
    view = codec.decode(value)
    view[0, 0] = 7  # a view of the value's own memory
    assert codec.decode(value)[0, 0] == 7
    frozen = bytes(value)
    copy = codec.decode(frozen)  # over a copy: torch has no read-only tensors
    copy[0, 0] = 9
    assert codec.decode(frozen)[0, 0] == 7

"""Cached values: a small fixed header plus the raw bytes, decoded without copying.

Layout (little endian)::

    magic  b"SNCA"            4 bytes
    version                   u8   (FORMAT_VERSION)
    kind                      u8   (RAW file bytes, TENSOR, IMAGE = PIL image as H x W [x C]
                                    uint8, ARRAY = numpy array, TV_IMAGE / TV_VIDEO / TV_MASK =
                                    a TENSOR of that ``torchvision.tv_tensors`` type)
    dtype                     u8   (index into _DTYPES)
    ndim                      u8
    shape                     ndim x u32 (an IMAGE's: H, W [, C], then its metadata's length)
    padding                   to a multiple of 8 bytes, so the payload is 8-byte aligned
    payload                   prod(shape) x itemsize bytes (an IMAGE's: its pixels)
    metadata                  IMAGE values only: the image's ``info`` as JSON

An image's ``info`` is what a transform may read besides its pixels (the EXIF orientation that
``ImageOps.exif_transpose`` applies, the ICC profile, the resolution), so a cached image keeps
it: values of plain types (None, bool, int, float, str, bytes, tuple, list, dict and Pillow's
``IFDRational``) are written tagged with their type, and an image whose info holds anything
else is refused (CodecError) rather than cached without it.

Decoding returns views into the value (``torch.frombuffer``/``np.frombuffer``), never a copy,
except for IMAGE values where PIL needs its own pixel buffer. Values are made as ``bytearray``
and the cache's replies are read into ``bytearray`` (``seneca._cache.resp``), so a tensor is
always a view of writable memory; a read-only buffer (``bytes``) given to :func:`decode` is
copied once before a tensor is made over it, as torch has no read-only tensors.

A value decodes to the type it was made from (bytes, tensor, PIL image with its ``info``,
numpy array, with its dtype); other types, dtypes and image modes are refused with
CodecError (the loader then does not cache them). Pickle is never used.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import struct
from enum import IntEnum
from typing import Any

import numpy as np
import torch
from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from seneca_base.errors import CodecError

__all__ = [
    "FIXED_SIZE",
    "FORMAT_VERSION",
    "MAGIC",
    "Kind",
    "decode",
    "encode",
    "encode_image_chw",
    "tensor_header_size",
    "tensor_layout",
]

MAGIC = b"SNCA"
FORMAT_VERSION = 2
_FIXED = struct.Struct("<4sBBBB")
#: Bytes at the start of every value that say how long its header is.
FIXED_SIZE = _FIXED.size


class Kind(IntEnum):
    """What a cached value holds."""

    RAW = 0
    TENSOR = 1
    IMAGE = 2
    ARRAY = 3
    # a TENSOR of torchvision's ``tv_tensors`` types that hold nothing but their pixels: the
    # transform steps after the cache convert by type (``tv_tensors.Image`` as an image)
    TV_IMAGE = 4
    TV_VIDEO = 5
    TV_MASK = 6


_KIND_CODES = frozenset(k.value for k in Kind)
#: the kinds laid out as a TENSOR is
_TENSOR_KINDS = frozenset({Kind.TENSOR, Kind.TV_IMAGE, Kind.TV_VIDEO, Kind.TV_MASK})


@functools.cache
def _tv_kinds() -> dict[type, Kind]:
    """The tensor types kept (torchvision's, imported when a tensor is first encoded)."""
    from torchvision import tv_tensors

    return {
        torch.Tensor: Kind.TENSOR,
        tv_tensors.Image: Kind.TV_IMAGE,
        tv_tensors.Video: Kind.TV_VIDEO,
        tv_tensors.Mask: Kind.TV_MASK,
    }


@functools.cache
def _tv_type(kind: Kind) -> type:
    return next(t for t, k in _tv_kinds().items() if k is kind)


_DTYPES: tuple[torch.dtype, ...] = (
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
    torch.uint16,
    torch.uint32,
    torch.uint64,
)
_DTYPE_CODE = {dt: i for i, dt in enumerate(_DTYPES)}
#: the numpy dtypes of the codes (numpy has no bfloat16), in this CPU's byte order
_ARRAY_CODE = {
    torch.empty(0, dtype=dt).numpy().dtype: i
    for dt, i in _DTYPE_CODE.items()
    if dt != torch.bfloat16
}
_IMAGE_MODES = {2: "L", 3: "RGB", 4: "RGBA"}  # key: ndim for L, channels for the others


def _header(kind: Kind, dtype_code: int, shape: tuple[int, ...]) -> bytes:
    if len(shape) > 255:
        raise CodecError(f"cannot encode {len(shape)} dimensions (at most 255)")
    head = _FIXED.pack(MAGIC, FORMAT_VERSION, kind, dtype_code, len(shape))
    head += struct.pack(f"<{len(shape)}I", *shape)
    return head + b"\0" * (-len(head) % 8)


def _tensor_bytes(t: torch.Tensor) -> memoryview:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; same bytes as int16
        t = t.view(torch.int16)
    return memoryview(t.numpy()).cast("B")


def _joined(*parts: bytes | memoryview) -> bytearray:
    """One value made of ``parts`` (writable: tensors decoded from it need no copy)."""
    return bytearray().join(parts)


def encode(obj: Any) -> bytearray:
    """Encode file bytes, a tensor, a numpy array or a PIL image as one cache value."""
    if isinstance(obj, bytes | bytearray | memoryview):
        payload = memoryview(obj).cast("B")
        return _joined(_header(Kind.RAW, _DTYPE_CODE[torch.uint8], (len(payload),)), payload)
    if isinstance(obj, Image.Image):
        if obj.mode not in _IMAGE_MODES.values():
            raise CodecError(f"cannot encode images of mode {obj.mode!r}")
        meta = _image_meta(obj)
        arr = np.asarray(obj)
        head = _header(Kind.IMAGE, 0, (*arr.shape, len(meta)))
        return _joined(head, memoryview(arr).cast("B"), meta)
    if isinstance(obj, np.ndarray):
        code = _ARRAY_CODE.get(obj.dtype)  # (not another byte order than this CPU's)
        if code is None:
            raise CodecError(f"cannot encode arrays of dtype {obj.dtype}")
        arr = np.ascontiguousarray(obj)
        payload = memoryview(arr).cast("B") if arr.size else memoryview(b"")
        return _joined(_header(Kind.ARRAY, code, obj.shape), payload)
    if isinstance(obj, torch.Tensor):
        kind = _tv_kinds().get(type(obj))
        if kind is None:  # another subclass (tv_tensors.BoundingBoxes holds its format too)
            raise CodecError(f"cannot encode tensors of type {type(obj).__name__}")
        if obj.dtype not in _DTYPE_CODE:
            raise CodecError(f"cannot encode tensors of dtype {obj.dtype}")
        head = _header(kind, _DTYPE_CODE[obj.dtype], tuple(obj.shape))
        return _joined(head, _tensor_bytes(obj.as_subclass(torch.Tensor)))
    raise CodecError(f"cannot encode a value of type {type(obj).__name__}")


def _image_meta(img: Image.Image) -> bytes:
    """``img``'s ``info`` as JSON, each value tagged with its type (the module's docs);
    CodecError when it holds a value of another type."""
    return json.dumps(_tagged(img.info)).encode()


def _tagged(value: Any) -> Any:
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is bytes:
        return {"b": base64.b64encode(value).decode("ascii")}
    if kind is tuple or kind is list:
        return {kind.__name__[0]: [_tagged(v) for v in value]}
    if kind is dict:
        return {"d": [[_tagged(k), _tagged(v)] for k, v in value.items()]}
    if kind is IFDRational:
        return {"r": [_tagged(value.numerator), value.denominator]}
    raise CodecError(f"cannot encode an image whose info holds a {kind.__name__}")


def _untagged(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    ((tag, v),) = value.items()
    if tag == "b":
        return base64.b64decode(v, validate=True)
    if tag in ("t", "l"):
        items = [_untagged(x) for x in v]
        return tuple(items) if tag == "t" else items
    if tag == "d":
        return {_untagged(k): _untagged(x) for k, x in v}
    if tag == "r":
        return IFDRational(_untagged(v[0]), v[1])
    raise ValueError(f"unknown tag {tag!r}")


def _with_meta(img: Image.Image, meta: bytes | memoryview) -> Image.Image:
    """``img`` (made from an array: no ``info`` yet) given the ``info`` of
    :func:`_image_meta`'s ``meta``."""
    try:
        info = _untagged(json.loads(bytes(meta)))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise CodecError(f"mismatched value: unreadable image metadata ({e})") from None
    if not isinstance(info, dict):
        raise CodecError("mismatched value: unreadable image metadata (not an info dict)")
    img.info.update(info)
    return img


def encode_image_chw(img: Image.Image) -> bytearray | None:
    """A TENSOR value of ``img``'s pixels laid out as ``PILToTensor`` gives them (C x H x W
    uint8, here contiguous), made band by band: no transposing copy, unlike
    ``encode(pil_to_tensor(img))``. None for modes other than L, RGB and RGBA."""
    if img.mode not in _IMAGE_MODES.values():
        return None
    bands = img.split()
    width, height = img.size
    head = _header(Kind.TENSOR, _DTYPE_CODE[torch.uint8], (len(bands), height, width))
    return _joined(head, *(band.tobytes() for band in bands))


def _read_only(buf: Any) -> bool:
    if isinstance(buf, bytearray):
        return False
    with memoryview(buf) as view:
        return view.readonly


def _parse(buf: bytes | memoryview) -> tuple[Kind, torch.dtype, tuple[int, ...], int]:
    if len(buf) < _FIXED.size:
        raise CodecError(f"truncated value: {len(buf)} bytes is shorter than the header")
    magic, version, kind, dtype_code, ndim = _FIXED.unpack_from(buf)
    if magic != MAGIC:
        raise CodecError(f"foreign value: magic {bytes(magic)!r} is not {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise CodecError(f"value has format version {version}, this Seneca reads {FORMAT_VERSION}")
    if kind not in _KIND_CODES or dtype_code >= len(_DTYPES):
        raise CodecError(f"foreign value: unknown kind {kind} or dtype code {dtype_code}")
    offset = _FIXED.size + 4 * ndim
    if len(buf) < offset:
        raise CodecError(f"truncated value: {len(buf)} bytes, header needs {offset}")
    shape = struct.unpack_from(f"<{ndim}I", buf, _FIXED.size)
    offset += -offset % 8
    dtype = _DTYPES[dtype_code]
    meta = 0  # an IMAGE's metadata, after its pixels: its length is its shape's last entry
    if kind == Kind.IMAGE:
        if ndim not in (3, 4):
            raise CodecError(f"mismatched value: image with shape entries {list(shape)}")
        shape, meta = shape[:-1], shape[-1]
    expected = offset + math.prod(shape) * dtype.itemsize + meta
    if len(buf) != expected:
        what = "truncated" if len(buf) < expected else "mismatched"
        raise CodecError(
            f"{what} value: {len(buf)} bytes, header ({dtype}, shape {list(shape)}) "
            f"needs {expected}"
        )
    return Kind(kind), dtype, shape, offset


def tensor_header_size(fixed: bytes | bytearray | memoryview, offset: int = 0) -> int | None:
    """The header size of a TENSOR value (or one laid out as it is: :data:`_TENSOR_KINDS`) from
    its first :data:`FIXED_SIZE` bytes (at ``offset`` in ``fixed``); None for any other value
    (another kind, version or a foreign one: decode it whole to find out)."""
    if len(fixed) - offset < FIXED_SIZE:
        return None
    magic, version, kind, dtype_code, ndim = _FIXED.unpack_from(fixed, offset)
    if magic != MAGIC or version != FORMAT_VERSION or kind not in _TENSOR_KINDS:
        return None
    if dtype_code >= len(_DTYPES):
        return None
    size = FIXED_SIZE + 4 * ndim
    return size + -size % 8


def tensor_layout(
    header: bytes | bytearray | memoryview, total: int
) -> tuple[torch.dtype, tuple[int, ...]] | None:
    """(dtype, shape) of a TENSOR value of ``total`` bytes whose whole header is ``header``
    (:func:`tensor_header_size` bytes); None when its payload would not be ``total`` minus
    the header (a damaged value: decode it whole for the error)."""
    size = tensor_header_size(header)
    if size is None or len(header) != size:
        return None
    _, _, _, dtype_code, ndim = _FIXED.unpack_from(header)
    shape = struct.unpack_from(f"<{ndim}I", header, FIXED_SIZE)
    dtype = _DTYPES[dtype_code]
    if size + math.prod(shape) * dtype.itemsize != total:
        return None
    return dtype, shape


def decode(
    buf: bytes | memoryview, expect: Kind | None = None, image_tensor: bool = False
) -> memoryview | torch.Tensor | Image.Image:
    """Decode a value made by :func:`encode`.

    RAW values come back as a memoryview, TENSOR values as a tensor (TV_IMAGE, TV_VIDEO and
    TV_MASK values as one of that ``tv_tensors`` type) and ARRAY values as a numpy
    array, all sharing memory with ``buf`` (zero-copy; a RAW or ARRAY value of an immutable
    ``bytes`` is read-only, and a tensor of one is made over a copy). IMAGE values come back as
    a PIL image with its ``info``, or with ``image_tensor`` as a zero-copy uint8
    tensor laid out as ``PILToTensor`` gives it (C x H x W, a permuted view). ``expect`` raises
    CodecError when the value is of another kind.
    """
    kind, dtype, shape, offset = _parse(buf)
    tensor = kind in _TENSOR_KINDS or (kind is Kind.IMAGE and image_tensor)
    if tensor and _read_only(buf):
        buf = bytearray(buf)  # a tensor is always over writable memory (see the module's doc)
    if expect is not None and kind != expect:
        raise CodecError(f"mismatched value: expected a {expect.name} value, found {kind.name}")
    count = math.prod(shape)
    if kind is Kind.RAW:
        return memoryview(buf)[offset:]
    if kind is Kind.IMAGE:
        if dtype != torch.uint8 or (len(shape) == 3 and shape[2] not in _IMAGE_MODES):
            raise CodecError(f"mismatched value: image of {dtype} with shape {list(shape)}")
        if image_tensor:
            hwc = torch.frombuffer(buf, dtype=torch.uint8, count=count, offset=offset)
            return hwc.view(shape[0], shape[1], -1).permute(2, 0, 1)
        arr = np.frombuffer(buf, dtype=np.uint8, count=count, offset=offset).reshape(shape)
        # mode from the shape: L, RGB or RGBA
        return _with_meta(Image.fromarray(arr), memoryview(buf)[offset + count :])
    if kind is Kind.ARRAY:
        np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        return np.frombuffer(buf, dtype=np_dtype, count=count, offset=offset).reshape(shape)
    if count == 0:
        out = torch.empty(shape, dtype=dtype)
    else:
        out = torch.frombuffer(buf, dtype=dtype, count=count, offset=offset).view(shape)
    if kind is not Kind.TENSOR:  # a tv_tensors type's
        out = out.as_subclass(_tv_type(kind))
    return out

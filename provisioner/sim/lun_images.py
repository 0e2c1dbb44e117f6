"""The firehose side of the qdl stand-in: a virtual board's LUN images and the images written into them.

What the firehose programmer does on the board, done to the per-LUN disk image files of the
virtual board, so tests can check the bytes at the right sectors: program ops written at
``start_sector * sector_size`` (copied kernel-side, zero runs punched as holes, an image bigger than
its partition cut at the partition's end), Android sparse images expanded, reads for patches. The
command line, the modelled USB link's timing and the order of a flash stay in
:mod:`provisioner.sim.qdl`.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from provisioner.sim.board import VirtualBoard
from provisioner.sim.qdl_xml import QdlFailure

if TYPE_CHECKING:
    from provisioner.sim.qdl import UsbClock

DRY_RUN_DISK_BYTES = 64 * 1024 * 1024 * 1024


class Device:
    """The firehose side: a board's LUN images (or, for --dry-run, nothing at all).

    LUN sizes and file descriptors are looked up once per run: the patch step makes about
    seventy small writes after the last image byte, where no modelled link time hides the
    stand-in's own work (an open and a stat each was most of it).
    """

    def __init__(self, board: VirtualBoard | None, sector_size: int) -> None:
        self.board = board
        self.sector_size = sector_size
        self.partitions: dict[str, dict[str, int]] = {}
        self._sectors: dict[int, int] = {}
        self._fds: dict[int, int] = {}

    def num_disk_sectors(self, lun: int) -> int:
        if self.board is None:
            return DRY_RUN_DISK_BYTES // self.sector_size
        if lun not in self._sectors:
            path = self.board.lun_path(lun)
            if not path.exists():
                raise QdlFailure(f"firehose: LUN {lun} does not exist on this device")
            self._sectors[lun] = path.stat().st_size // self.sector_size
        return self._sectors[lun]

    def _fd(self, lun: int) -> int:
        assert self.board is not None
        if lun not in self._fds:
            self._fds[lun] = os.open(self.board.lun_path(lun), os.O_RDWR)
        return self._fds[lun]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def write(self, lun: int, offset: int, data: bytes) -> None:
        if self.board is None:
            return
        os.pwrite(self._fd(lun), data, offset)

    def zero(self, lun: int, offset: int, length: int) -> None:
        if self.board is None:
            return
        with open(self.board.lun_path(lun), "r+b") as fh:
            _zero_range(fh.fileno(), offset, length)

    def write_extents(self, lun: int, base: int, image: Path, extents: Iterable[Extent], limit: int,
                      usb: UsbClock | None = None) -> None:
        """Write an image's extents at byte ``base`` of the LUN, up to ``limit`` bytes.

        Data is copied kernel-side (``copy_file_range``), never through Python buffers, the way
        real qdl's cost is the USB link and not the host CPU; zero extents become holes (punched,
        so a re-flash really clears old data while LUN images stay sparse). ``usb`` paces the
        bytes to the modelled link rate by sleeping.
        """
        if self.board is None:
            return
        done = 0
        with open(self.board.lun_path(lun), "r+b") as out, open(image, "rb") as src:
            for ext in extents:
                if ext.offset >= limit:
                    break
                length = min(ext.length, limit - ext.offset)
                for pos, n in _slices(ext.offset, length, usb):
                    if ext.src is not None:
                        _copy_range(src.fileno(), ext.src + (pos - ext.offset), out.fileno(), base + pos, n)
                    elif ext.fill is not None:
                        os.pwrite(out.fileno(), ext.fill * (n // len(ext.fill)), base + pos)
                    else:
                        _zero_range(out.fileno(), base + pos, n)
                    if usb is not None:
                        usb.spend(n)
                done = ext.offset + length
            end = -(-done // self.sector_size) * self.sector_size      # zero-pad the last sector
            if end > done:
                _zero_range(out.fileno(), base + done, min(end, limit) - done)

    def read(self, lun: int, offset: int, length: int) -> bytes:
        if self.board is None:
            return b"\0" * length
        return os.pread(self._fd(lun), length, offset).ljust(length, b"\0")


SPARSE_MAGIC = 0xED26FF3A
CHUNK_RAW, CHUNK_FILL, CHUNK_DONT_CARE, CHUNK_CRC32 = 0xCAC1, 0xCAC2, 0xCAC3, 0xCAC4
PACE_CHUNK = 256 * 1024          # bytes between two pacing sleeps on a throttled link


@dataclass(frozen=True)
class Extent:
    """A piece of the expanded image at ``offset``: the image file's bytes at ``src``, a repeated
    4-byte ``fill`` pattern (sparse FILL chunk), or zeros (both None)."""

    offset: int
    length: int
    src: int | None = None
    fill: bytes | None = None


def image_extents(path: Path, skip: int, sparse: bool) -> tuple[int, Iterator[Extent]]:
    """(expanded size, iterator of :class:`Extent`) for an image file; reads headers, never data.

    Android sparse images (``sparse="true"``, qdl >= 2.2) are expanded chunk by chunk; DONT_CARE
    chunks are not written at all, as on the real device. A raw image's holes (``SEEK_HOLE``)
    become zero extents, its data ranges file ranges.
    """
    with open(path, "rb") as fh:
        head = fh.read(28)
    if sparse and len(head) == 28 and struct.unpack_from("<I", head)[0] == SPARSE_MAGIC:
        _, _, _, hdr_sz, chunk_hdr_sz, blk_sz, total_blks, total_chunks, _ = struct.unpack("<IHHHHIIII", head)
        file_size = path.stat().st_size

        def sparse_iter() -> Iterator[Extent]:
            with open(path, "rb") as fh:
                pos, off = hdr_sz, 0
                for _ in range(total_chunks):
                    ch = os.pread(fh.fileno(), chunk_hdr_sz, pos)
                    if len(ch) < 12:
                        raise QdlFailure(f"{path.name}: sparse image is truncated")
                    ctype, _, nblk, _ = struct.unpack_from("<HHII", ch)
                    pos += chunk_hdr_sz
                    length = nblk * blk_sz
                    if ctype == CHUNK_RAW:
                        if pos + length > file_size:
                            raise QdlFailure(f"{path.name}: sparse image is truncated")
                        yield Extent(off, length, src=pos)
                        pos += length
                    elif ctype == CHUNK_FILL:
                        value = os.pread(fh.fileno(), 4, pos)
                        pos += 4
                        yield Extent(off, length, fill=None if value == b"\0\0\0\0" else value)
                    elif ctype == CHUNK_CRC32:
                        pos += 4
                    elif ctype != CHUNK_DONT_CARE:
                        raise QdlFailure(f"{path.name}: unknown sparse chunk type 0x{ctype:04x}")
                    off += length
        return blk_sz * total_blks, sparse_iter()

    end = path.stat().st_size
    size = max(0, end - skip)

    def raw_iter() -> Iterator[Extent]:
        with open(path, "rb") as fh:
            fd, pos = fh.fileno(), skip
            while pos < end:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as exc:      # ENXIO: only a hole is left; EINVAL: no hole support
                    data = end if exc.errno == errno.ENXIO else pos
                if data > pos:
                    yield Extent(pos - skip, min(data, end) - pos)
                    pos = data
                    if pos >= end:
                        return
                try:
                    hole = min(os.lseek(fd, pos, os.SEEK_HOLE), end)
                except OSError:
                    hole = end
                yield Extent(pos - skip, hole - pos, src=pos)
                pos = hole
    return size, raw_iter()


def _slices(offset: int, length: int, usb: UsbClock | None) -> Iterator[tuple[int, int]]:
    """One slice unthrottled (the kernel copies it at once), else PACE_CHUNK pieces to pace."""
    step = length if usb is None or not usb.rate else PACE_CHUNK
    pos, stop = offset, offset + length
    while pos < stop:
        n = min(step, stop - pos)
        yield pos, n
        pos += n


def _copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int) -> None:
    """Copy ``length`` bytes file to file in the kernel; pread/pwrite where copy_file_range is not."""
    while length > 0:
        try:
            n = os.copy_file_range(src_fd, dst_fd, length, src_off, dst_off)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.pwrite(dst_fd, os.pread(src_fd, min(length, 1 << 20), src_off), dst_off)
        if n <= 0:                          # the image shrank under us: the rest reads as zeros
            _zero_range(dst_fd, dst_off, length)
            return
        src_off, dst_off, length = src_off + n, dst_off + n, length - n


@functools.cache
def _fallocate() -> Callable[[int, int, int, int], int] | None:
    """libc fallocate(2), looked up once per process (Python's os has no PUNCH_HOLE)."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).fallocate
        fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        return fn
    except (OSError, AttributeError):
        return None


def _zero_range(fd: int, offset: int, length: int) -> None:
    """Zero ``length`` bytes at ``offset``: punch a hole (stays sparse), else write zeros."""
    if length <= 0:
        return
    fallocate = _fallocate()
    if fallocate is not None and fallocate(fd, 0x01 | 0x02, offset, length) == 0:   # KEEP_SIZE | PUNCH_HOLE
        return
    zeros = bytes(min(length, 1 << 20))
    while length:
        n = os.pwrite(fd, zeros[:min(length, len(zeros))], offset)
        offset, length = offset + n, length - n

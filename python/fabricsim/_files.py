"""The files fabricsim reads and writes: one rule for a path argument, one writer.

A path is a non-empty str or ``os.PathLike`` of one: never an int or a bool, which ``open``
would take for a file descriptor and close when done (``True`` is stdout), nor bytes or None.

Every file fabricsim writes is written whole or not at all. Its bytes go to a temporary file
beside the target (same directory, so the rename below stays on one file system), which is
flushed and synced to the disk, then renamed over the target, and the directory is synced so
that the rename survives a crash. A set of files (a result's tables, with its plots and
trace) is installed together: each earlier file keeps a second name (a hard link, or the
file renamed aside where the file system has no links) until every new file is in place and
the directory synced. A failure at any step (a full disk, an I/O error, Ctrl-C) removes the
temporaries and puts each earlier file back under its name; the rollback moves back only a
file it set aside itself and removes only a file it wrote, so it never writes over a good
one. The error is a :class:`WriteError` naming the path and the cause (Ctrl-C stays a
``KeyboardInterrupt``). A crash of the machine during the few renames can leave the earlier
files beside the new ones, under their hidden second names (``.<name>.<random>.old``).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Union

from ._checks import shown
from .exceptions import InvalidArgumentError, WriteError

# What link() fails with on a file system without hard links (FAT, some network shares).
_NO_LINKS = (errno.EPERM, errno.EACCES, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)

# What a file is written from: its bytes, or a function writing them into a binary file.
Content = Union[bytes, Callable[[BinaryIO], Any]]


def path_argument(name: str, value: Any) -> str:
    """``value`` as a str path, or :class:`InvalidArgumentError` naming it (an int is refused:
    ``open`` would read or write that file descriptor and then close it)."""
    try:
        text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    except TypeError:  # an __fspath__ that gives neither str nor bytes
        text = None
    if not isinstance(text, str) or not text:
        hint = " (an int is a file descriptor, which fabricsim does not take: pass the file's path)" \
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else ""
        what = shown(value)
        raise InvalidArgumentError(f"{name} must be a path (a non-empty str or os.PathLike), got "
                                   f"{type(value).__name__} {what if len(what) <= 100 else what[:97] + '...'}{hint}")
    return text


def read_bytes(name: str, value: Any) -> tuple[str, bytes]:
    """(the path as a str, the file's bytes) for the path argument ``value``. A file that
    cannot be read raises ``OSError`` (a NUL in the path too), for the caller to name it as
    its own kind of file."""
    path = path_argument(name, value)
    try:
        with open(path, "rb") as handle:
            return path, handle.read()
    except ValueError as err:  # a NUL in the path
        raise OSError(errno.EINVAL, str(err), path) from None


def reason(err: BaseException) -> str:
    """An OS error's cause as people read it (``No space left on device``), else its text."""
    return err.strerror if isinstance(err, OSError) and err.strerror else str(err)


def output_directory(name: str, directory: Any) -> str:
    """``directory`` made if need be and checked writable (a file made and removed in it), as
    a str: checked before a long run whose results go there (``fabricsim demo --parquet``).
    Raises :class:`WriteError` naming the path."""
    path = _directory(name, directory)
    try:
        fd, probe = _new_file(os.path.join(path, "probe"))
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        raise WriteError(f"cannot write {path!r}: {reason(err)}") from err
    return path


def write_file(name: str, file: Any, content: Content) -> str:
    """Writes ``content`` to the path argument ``file`` whole or not at all (module docs);
    returns the path as a str. A symbolic link is written through (the file it names is
    replaced, the link stays)."""
    path = path_argument(name, file)
    try:
        target = os.path.realpath(path)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise WriteError(f"cannot write {path!r}: {reason(err)}") from err
    _install([_File(path, content, target)], os.path.dirname(target), path)
    return path


def write_files(name: str, directory: Any, contents: Mapping[str, Content | None]) -> list[str]:
    """Writes each ``{file name: content}`` into ``directory`` (made if need be), all of them
    or none (module docs); a name whose content is None is removed if it is there. Returns
    the paths written, in the mapping's order."""
    root = _directory(name, directory)
    real = os.path.realpath(root)
    files = [_File(os.path.join(root, n), c, os.path.join(real, n)) for n, c in contents.items()]
    _install(files, real, root)
    return [f.path for f in files if f.content is not None]


def _directory(name: str, directory: Any) -> str:
    """The path argument ``directory``, made if need be, or :class:`WriteError` naming it."""
    path = path_argument(name, directory)
    try:
        os.makedirs(path, exist_ok=True)
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise WriteError(f"cannot write {path!r}: {reason(err)}") from err
    return path


def _hidden_name(beside: str, suffix: str) -> str:
    """A fresh hidden name in ``beside``'s directory: ``.<its name>.<random>.<suffix>``."""
    head, tail = os.path.split(beside)
    return os.path.join(head, f".{tail[:200]}.{secrets.token_hex(6)}.{suffix}")


def _new_file(beside: str) -> tuple[int, str]:
    """(descriptor, path) of a file made new beside ``beside``, under a hidden name."""
    while True:
        name = _hidden_name(beside, "tmp")
        try:  # 0o666 less the umask, as open() would make the file
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), name
        except FileExistsError:
            continue


@dataclass
class _File:
    """One target of an install and what it took to write it (for the rollback)."""

    path: str  # as the caller named it, for messages
    content: Content | None  # None: remove the file
    target: str = ""  # where it is written (links resolved)
    temporary: str | None = None  # the new file, until it takes the target's name
    written: os.stat_result | None = None  # its identity, to tell it from any other file
    aside: str | None = None  # the earlier file's second name
    had_earlier: bool = False

    def __post_init__(self) -> None:
        self.target = self.target or self.path

    def create(self) -> None:
        """Writes the temporary file, synced to the disk."""
        if os.path.isdir(self.target):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.path)
        if os.path.lexists(self.target) and not os.access(self.target, os.W_OK):
            # A rename would replace a file its owner made read-only, where open() refuses.
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.path)
        fd, self.temporary = _new_file(self.target)
        self.written = os.fstat(fd)
        with os.fdopen(fd, "wb") as handle:
            try:  # the earlier file's permissions carry over
                os.chmod(fd, stat.S_IMODE(os.stat(self.target).st_mode))
            except (FileNotFoundError, NotImplementedError):
                pass
            if isinstance(self.content, bytes):
                handle.write(self.content)
            elif self.content is not None:
                self.content(handle)
            handle.flush()
            os.fsync(fd)

    def set_aside(self) -> None:
        """Gives the earlier file (if any) a second name, then the new one takes the target's."""
        # A directory of that name is not an earlier file: it stays (and a new file is refused).
        self.had_earlier = os.path.lexists(self.target) and not os.path.isdir(self.target)
        if self.had_earlier:
            self.aside = _hidden_name(self.target, "old")
            if self.content is None:
                os.rename(self.target, self.aside)
                return
            try:
                os.link(self.target, self.aside)
            except (OSError, NotImplementedError) as err:
                if isinstance(err, OSError) and err.errno not in _NO_LINKS:
                    raise
                os.rename(self.target, self.aside)  # no hard links here: the target is gone until replaced

    def install(self) -> None:
        if self.content is not None:
            assert self.temporary is not None
            os.replace(self.temporary, self.target)

    def roll_back(self) -> None:
        """Puts the earlier file back where the new one (or nothing) stands; removes the new
        one where there was none. Touches no file it did not write or set aside."""
        ours = self.written is not None and _holds(self.target, self.written)
        if self.aside is not None and os.path.lexists(self.aside):
            if ours or not os.path.lexists(self.target):
                _quietly(os.replace, self.aside, self.target)
            else:  # the target still holds the earlier file: the second name goes
                _quietly(os.remove, self.aside)
        elif ours and not self.had_earlier:
            _quietly(os.remove, self.target)
        if self.temporary is not None and self.written is not None and _holds(self.temporary, self.written):
            _quietly(os.remove, self.temporary)


def _holds(path: str, identity: os.stat_result) -> bool:
    try:
        return os.path.samestat(os.lstat(path), identity)
    except OSError:
        return False


def _quietly(action: Callable[..., Any], *args: Any) -> None:
    """Undoing a failed write as far as it can: an error here would hide the first one."""
    try:
        action(*args)
    except OSError:
        pass


def _sync_directory(directory: str) -> None:
    """Makes the renames in ``directory`` durable (a no-op where directories cannot be opened)."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open a directory to sync it
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno != errno.EINVAL:  # a file system that cannot sync a directory
            raise
    finally:
        os.close(fd)


def _install(files: list[_File], directory: str, label: str) -> None:
    """Writes every temporary, then installs them together in ``directory``, or rolls every
    one back; an error names the file it came from (``label`` for the directory's sync)."""
    current = label
    try:
        for f in files:
            current = f.path
            if f.content is not None:
                f.create()
        for f in files:
            current = f.path
            f.set_aside()
            f.install()
        current = label
        _sync_directory(directory)
    except BaseException as err:  # Ctrl-C too: every file goes back to what it was
        for f in reversed(files):
            f.roll_back()
        if isinstance(err, (OSError, ValueError)) and not isinstance(err, WriteError):
            raise WriteError(f"cannot write {current!r}: {reason(err)}") from err
        raise
    for f in files:
        if f.aside is not None:
            _quietly(os.remove, f.aside)


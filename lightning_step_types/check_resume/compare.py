"""The uninterrupted fit against an interrupted, resumed chain, value by value and bit for bit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from lightning_step_types.check_resume.runs import Fit, Row, is_mapping, is_sequence, timer_like
from lightning_step_types.resume.holders import RANK_SAVED
from lightning_step_types.resume.messages import CHECKPOINT_KEY
from lightning_step_types.resume.save import STATE

__all__ = ["Difference", "chained_rows", "differences"]


@dataclass(frozen=True)
class Difference:
    """One item the resumed chain ends with that the uninterrupted fit does not: its two values."""

    item: str
    uninterrupted: str
    resumed: str

    def __str__(self) -> str:
        return f"{self.item}: {self.resumed} after the resume, {self.uninterrupted} uninterrupted"


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return repr(value.item()) if value.numel() == 1 else f"tensor of shape {tuple(value.shape)}"
    if is_mapping(value):
        return "{" + ", ".join(sorted(repr(key) for key in value)) + "}"
    if is_sequence(value) and any(isinstance(item, torch.Tensor) for item in value):
        text = ", ".join(_shown(item) for item in value)
        return f"[{text}]" if isinstance(value, list) else f"({text})"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _normalized(value: Any, root: Path) -> Any:
    """A value with its fit's folder written ``<root>`` (each fit runs in a folder of its own)."""
    if is_mapping(value):
        items = value.items()
        return {_normalized(k, root): _normalized(v, root) for k, v in items}
    if is_sequence(value):
        return [_normalized(v, root) for v in value]
    if isinstance(value, (str, Path)):
        return str(value).replace(str(root), "<root>")
    return value


def _tensor_difference(a: torch.Tensor, b: torch.Tensor, item: str) -> Difference | None:
    if a.dtype != b.dtype or a.shape != b.shape:
        return Difference(f"{item} (dtype, shape)", f"{a.dtype} {tuple(a.shape)}", f"{b.dtype} {tuple(b.shape)}")
    if torch.equal(a, b):
        return None
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same |= torch.isnan(a) & torch.isnan(b)
    if bool(same.all()):
        return None
    positions: list[int] = [int(i) for i in (~same).nonzero()[0]]
    index = tuple(positions)
    where = f"{item}[{', '.join(map(str, index))}]" if index else item
    return Difference(where, repr(a[index].item()), repr(b[index].item()))


def first_difference(a: Any, b: Any, item: str) -> Difference | None:
    """The first place two values differ, bit for bit, with both values there; or None."""
    if is_mapping(a) and is_mapping(b):
        left, right = a, b
        keys_a, keys_b = {str(key) for key in left}, {str(key) for key in right}
        if keys_a != keys_b:
            return Difference(f"{item} keys", _shown(sorted(keys_a - keys_b)), _shown(sorted(keys_b - keys_a)))
        by_name = {str(key): value for key, value in right.items()}
        for key, value in left.items():
            found = first_difference(value, by_name[str(key)], f"{item}[{key!r}]")
            if found is not None:
                return found
        return None
    if is_sequence(a) and is_sequence(b):
        first, second = a, b
        if len(first) != len(second):
            return Difference(f"{item} length", str(len(first)), str(len(second)))
        for index, (x, y) in enumerate(zip(first, second)):
            found = first_difference(x, y, f"{item}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _tensor_difference(a, b, item)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return Difference(item, _shown(a), _shown(b))
    return _plain_difference(a, b, item)


def _plain_difference(a: object, b: object, item: str) -> Difference | None:
    if type(a) is type(b) and type(a).__eq__ is object.__eq__ and hasattr(a, "__dict__") and a is not b:
        # an object that compares by identity (a checkpoint's hyperparameters may hold one, as
        # pytorch-forecasting's normalizers): two loads of a file are two objects, so by its attributes
        try:
            return first_difference(vars(a), vars(b), item)
        except RecursionError:  # attributes that lead back to the object: by what it prints as
            return None if repr(a) == repr(b) else Difference(item, _shown(a), _shown(b))
    try:
        same = bool(a == b) or (a != a and b != b)  # NaN is NaN
    except Exception:  # values that do not compare: by what they print as
        same = repr(a) == repr(b)
    return None if same else Difference(item, _shown(a), _shown(b))


def _named(reference: Mapping[str, Any], resumed: Mapping[str, Any], kind: str) -> list[Difference]:
    """Each named value of one kind that differs: its first differing place."""
    found: list[Difference] = []
    for name in sorted(set(reference) | set(resumed)):
        item = f"{kind} {name}"
        if name not in resumed:
            found.append(Difference(item, _shown(reference[name]), "absent"))
        elif name not in reference:
            found.append(Difference(item, "absent", _shown(resumed[name])))
        else:
            difference = first_difference(reference[name], resumed[name], item)
            if difference is not None:
                found.append(difference)
    return found


def chained_rows(chain: list[Fit]) -> dict[tuple[int, int, int, int], Row]:
    """The rows a resumed chain leaves: each fit's rows up to where the next one resumed (the place of
    its first row), then the last fit's."""
    kept: dict[tuple[int, int, int, int], Row] = {}
    for index, fit in enumerate(chain):
        following = chain[index + 1].rows if index + 1 < len(chain) else []
        resumed_at = following[0].position[:3] if following else None
        for row in fit.rows:
            if resumed_at is None or row.position[:3] < resumed_at:
                kept[row.position] = row
    return kept


def _place(position: tuple[int, int, int, int]) -> str:
    epoch, batches, validating, index = position
    kind = ("", " (validation)", " (epoch end)")[validating]
    return f"logged row {index} at epoch {epoch} after {batches} batches{kind}"


def _row_differences(reference: list[Row], chain: list[Fit]) -> list[Difference]:
    expected = {row.position: row for row in reference}
    got = chained_rows(chain)
    found: list[Difference] = []
    for position in sorted(set(expected) | set(got)):
        where = _place(position)
        if position not in got:
            found.append(Difference(where, _shown(dict(expected[position].values)), "absent"))
        elif position not in expected:
            found.append(Difference(where, "absent", _shown(dict(got[position].values))))
        elif got[position].step != expected[position].step:
            found.append(Difference(f"{where}: step", str(expected[position].step), str(got[position].step)))
        else:
            difference = first_difference(dict(expected[position].values), dict(got[position].values), where)
            if difference is not None:
                found.append(difference)
    return found


def _kept_files(fit: Fit) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for directory in fit.checkpoint_dirs:
        if directory.exists():
            for path in sorted(directory.glob("*.ckpt")):
                files[str(path).replace(str(fit.root), "<root>")] = path
    return files


def _checkpoint_contents(path: Path, fit: Fit) -> Any:
    """A checkpoint file's contents, its fit's folder written ``<root>``, the check's own callbacks left out;
    a link (``ModelCheckpoint(save_last="link")``) by where it points."""
    if path.is_symlink():
        return {"link to": str(path.readlink()).replace(str(fit.root), "<root>")}
    contents: Any = torch.load(path, map_location="cpu", weights_only=False)
    user = {key.split(": ", 1)[1] for key in fit.callbacks}
    timers = {key.split(": ", 1)[1] for key in fit.callbacks if timer_like(key)}

    def users(entries: Any) -> dict[str, Any]:
        return {
            key: ({k: None for k in value} if key in timers else value) for key, value in entries.items() if key in user
        }

    ranks: Any = contents.get(CHECKPOINT_KEY, {}).get(STATE, {}).get("ranks") or []
    for state in ranks:  # each process's own callback entries (under DDP, those of ranks past 0)
        holders: Any = state.get(RANK_SAVED) if is_mapping(state) else None
        if isinstance(holders, dict):
            part = cast("dict[str, Any]", holders)
            if is_mapping(part.get("callbacks")):
                part["callbacks"] = users(part["callbacks"])
    return _normalized(_without_progress({**contents, "callbacks": users(contents.get("callbacks", {}))}), fit.root)


def _without_progress(value: Any) -> Any:
    """Leaves out Lightning's loop progress counters (``loops``, and the copy of the fit loop's the library
    keeps): they count an interrupted batch's hooks twice. The counters a resumed fit goes on from are
    compared on their own (``global_step``, the logger's step, the epochs completed)."""
    if is_mapping(value):
        items = value.items()
        return {k: _without_progress(v) for k, v in items if k not in PROGRESS}
    return value


PROGRESS = ("loops", "fit_loop")


def _file_differences(reference: Fit, chain: list[Fit]) -> list[Difference]:
    """The files the chain's last fit keeps against the uninterrupted fit's, and each one's contents. A file a
    fit of the chain resumed from is left out where the uninterrupted fit did not keep it: ModelCheckpoint
    never removes the checkpoint its fit resumed from (``_should_remove_checkpoint``), by design."""
    resumed = chain[-1]
    expected, got = _kept_files(reference), _kept_files(resumed)
    sources = {fit.resumed_from.resolve() for fit in chain if fit.resumed_from is not None}
    got = {name: path for name, path in got.items() if name in expected or path.resolve() not in sources}
    found: list[Difference] = []
    if sorted(expected) != sorted(got):
        found.append(Difference("checkpoint files kept", _shown(sorted(expected)), _shown(sorted(got))))
    for name in sorted(set(expected) & set(got)):
        difference = first_difference(
            _checkpoint_contents(expected[name], reference), _checkpoint_contents(got[name], resumed), name
        )
        if difference is not None:
            found.append(difference)
    return found


def _keys_only(state: Any) -> Any:
    """Lightning's ``Timer`` state: its layout only (elapsed time differs from run to run)."""
    return {str(key): None for key in state} if is_mapping(state) else None


def _callback_states(fit: Fit) -> dict[str, Any]:
    return {
        key: _keys_only(state) if timer_like(key) else _normalized(state, fit.root)
        for key, state in fit.callbacks.items()
    }


def _callback_attributes(fit: Fit) -> dict[str, Any]:
    """Each callback's plain attributes, by ``<index>: <state_key>.<name>``, its fit's folder written ``<root>``."""
    return {
        f"{key}.{name}": _normalized(value, fit.root)
        for key, attributes in fit.callback_attributes.items()
        for name, value in attributes.items()
    }


def _attributes_at_resume(reference: Fit, resumed: Fit) -> list[Difference]:
    """The module's plain attributes as the resumed fit's first batch starts, against the uninterrupted
    fit's at that batch: an attribute no checkpoint holds shows here even where the fit's end resets it."""
    for (epoch, batch), attributes in resumed.attributes_at.items():
        if (epoch, batch) in reference.attributes_at:
            kind = f"at the resume (epoch {epoch}, batch {batch}) module attribute"
            return _named(reference.attributes_at[(epoch, batch)], attributes, kind)
    return []


def _numbered(states: list[Any]) -> dict[str, Any]:
    return {str(index): state for index, state in enumerate(states)}


def differences(reference: Fit, chain: list[Fit]) -> list[Difference]:
    """What the chain's last fit (and the rows of all of them) ends with that the uninterrupted fit does not."""
    last = chain[-1]
    # the module's attributes as the resumed fit starts, then the fit's end: what a resume restores
    # (the counters, the module's attributes, the callbacks' states and attributes) before what follows from it
    found = _attributes_at_resume(reference, last)
    found += [
        Difference(d.item.strip(), d.uninterrupted, d.resumed) for d in _named(reference.counters, last.counters, "")
    ]
    found += _named(reference.attributes, last.attributes, "module attribute")
    found += _named(_callback_states(reference), _callback_states(last), "callback state")
    found += _named(_callback_attributes(reference), _callback_attributes(last), "callback attribute")
    found += _named(reference.state, last.state, "state_dict")
    found += _named(_numbered(reference.optimizers), _numbered(last.optimizers), "optimizer")
    found += _named(_numbered(reference.schedulers), _numbered(last.schedulers), "scheduler")
    found += _named(reference.callback_metrics, last.callback_metrics, "callback_metrics")
    found += _named(reference.logged_metrics, last.logged_metrics, "logged_metrics")
    found += _row_differences(reference.rows, chain)
    found += _file_differences(reference, chain)
    return found

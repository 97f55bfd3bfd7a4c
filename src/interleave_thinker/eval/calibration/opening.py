"""OpenING's Interleaved Arena: how often a judge's pairwise verdict agrees with people's.

Data (``--data DIR``, the files of OpenING's ``Interleaved_Arena/`` at the pinned commit, see
:mod:`interleave_thinker.eval.calibration.labels`): ``judge_modelAB_results.json`` holds 4,302 human
verdicts, one per (instance, model A, model B); ``gpt-judge_modelAB_results.json`` GPT-4o's and
``intjudge_rag-judge_modelAB_results.json`` IntJudge's verdicts on the same pairs. A verdict is ``A``,
``B``, ``Tie(A)``, ``Tie(B)`` (a tie leaning to one side) or ``Tie``. Any other judge's verdicts in this
format may be added (``--judge NAME=FILE``).

A pair is keyed as the authors key it, ``data_id`` with the two models' names; a key given twice keeps
its last verdict (their dictionary does the same). Only pairs both sides judged are counted.

The four rules (OpenING's ``calculate_agreement.py`` at the pinned commit for the first two and the
third; the fourth is our reading of the paper's "tie as 0.5" column, see docs/notes/calibration.md):

- ``fdt`` (force-dividing ties): ``Tie(A)`` counts as ``A``, ``Tie(B)`` as ``B``, a bare ``Tie`` as
  ``A``; agreement is the share of pairs with the same side. The published 82.42% (IntJudge) and
  71.08% (GPT-4o) are this rule.
- ``without_tie``: pairs where either side says a tie are left out.
- ``tie_as_0``: every tie is one verdict, "tie"; a pair agrees when both say the same of A, B, tie, so a
  tie facing a side counts 0 (the repository's "with tie" rule).
- ``tie_as_half``: as ``tie_as_0``, but a tie facing a side counts one half.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interleave_thinker.core.errors import InputError
from interleave_thinker.core.untrusted import MAX_JSON_BYTES, load_json, read_bounded

NAME = "opening"
HUMAN_FILE = "judge_modelAB_results.json"
JUDGE_FILES = {
    "IntJudge": "intjudge_rag-judge_modelAB_results.json",
    "GPT-4o": "gpt-judge_modelAB_results.json",
}
PUBLISHED = {"IntJudge": 82.42, "GPT-4o": 71.08}
"""Agreement with people under FDT, in percent: OpenING's README (IntJudge 82.42%, "outperforming
GPT-based evaluators by 11.34%", so GPT-4o 71.08%)."""
SOURCE = (
    "OpenING README and calculate_agreement.py, LanceZPF/OpenING@56b663bc84ef64960c0253325c4a89cd10ddf7f1"
)
RULES = ("fdt", "without_tie", "tie_as_0", "tie_as_half")
RULE_TITLES = {
    "fdt": "FDT (force-dividing ties)",
    "without_tie": "w/o tie",
    "tie_as_0": "w/ tie (0)",
    "tie_as_half": "w/ tie (0.5)",
}
VERDICTS = ("A", "B", "Tie(A)", "Tie(B)", "Tie")
TIE = "Tie"
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Verdicts:
    """One side's verdicts by pair, and how its file was read."""

    name: str
    path: Path
    entries: int
    """Entries in the file, repeats included (a pair's last verdict is the one kept)."""
    by_pair: Mapping[Key, str]

    @property
    def repeated(self) -> int:
        return self.entries - len(self.by_pair)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise InputError(f"{where}: expected an object with a 'name' string.")
    return value["name"]


def read_verdicts(path: Path, name: str) -> Verdicts:
    """The verdicts of one file (a JSON list of ``{data_id, model_A, model_B, winner}``), checked."""
    if not path.is_file():
        raise InputError(f"{path}: no such file; --data must hold OpenING's Interleaved_Arena files.")
    rows = load_json(read_bounded(path, MAX_JSON_BYTES, what=path.name))
    if not isinstance(rows, list):
        raise InputError(f"{path}: expected a JSON list of verdicts.")
    by_pair: dict[Key, str] = {}
    for index, row in enumerate(rows):
        where = f"{path} entry {index}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected an object.")
        winner = row.get("winner")
        if winner not in VERDICTS:
            raise InputError(f"{where}: winner {str(winner)[:40]!r} is not one of {', '.join(VERDICTS)}.")
        key = (str(row.get("data_id")), _name(row.get("model_A"), where), _name(row.get("model_B"), where))
        by_pair[key] = winner
    return Verdicts(name, path, len(rows), by_pair)


def force_divided(verdict: str) -> str:
    """A tie given to the side it leans to; a bare tie to A, as the authors' rule does."""
    return {"Tie(A)": "A", "Tie(B)": "B", TIE: "A"}.get(verdict, verdict)


def simplified(verdict: str) -> str:
    return TIE if verdict.startswith(TIE) else verdict


def pair_credit(rule: str, human: str, judge: str) -> float | None:
    """What one pair adds to the agreeing count under ``rule`` (None: the pair is left out)."""
    if rule == "fdt":
        return float(force_divided(human) == force_divided(judge))
    h, j = simplified(human), simplified(judge)
    if rule == "without_tie":
        return None if TIE in (h, j) else float(h == j)
    if h == j:
        return 1.0
    if TIE in (h, j):
        return 0.5 if rule == "tie_as_half" else 0.0
    return 0.0


def agreement(human: Verdicts, judge: Verdicts) -> dict[str, Any]:
    """The judge against people under the four rules: percent, agreeing count, pairs counted."""
    shared = [key for key in human.by_pair if key in judge.by_pair]
    rules: dict[str, Any] = {}
    for rule in RULES:
        credits = [pair_credit(rule, human.by_pair[k], judge.by_pair[k]) for k in shared]
        counted = [c for c in credits if c is not None]
        agree = sum(counted)
        rules[rule] = {
            "agreement": round(100 * agree / len(counted), 4) if counted else None,
            "agree": agree,
            "pairs": len(counted),
        }
    return {
        "file": judge.path.name,
        "entries": judge.entries,
        "repeated_keys": judge.repeated,
        "shared_pairs": len(shared),
        "human_pairs_unjudged": len(human.by_pair) - len(shared),
        "verdicts": _counts(judge),
        "rules": rules,
        "published_fdt": PUBLISHED.get(judge.name),
    }


def _counts(verdicts: Verdicts) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for verdict in verdicts.by_pair.values():
        counts[verdict] += 1
    return {k: v for k, v in counts.items() if v or k != TIE}


def calibrate(data: Path, extra: dict[str, Path] | None = None) -> dict[str, Any]:
    """Every judge of ``data`` (and ``extra``, name to verdict file) against the human verdicts."""
    if not data.is_dir():
        raise InputError(
            f"--data {data}: no such folder; give the folder of OpenING's Interleaved_Arena files."
        )
    human = read_verdicts(data / HUMAN_FILE, "human")
    files = {name: data / file for name, file in JUDGE_FILES.items() if (data / file).is_file()}
    files.update(extra or {})
    if not files:
        raise InputError(
            f"--data {data}: no judge verdicts ({', '.join(JUDGE_FILES.values())}); add one with --judge NAME=FILE."
        )
    judges = {name: agreement(human, read_verdicts(path, name)) for name, path in files.items()}
    return {
        "set": NAME,
        "kind": "pairwise",
        "data": str(data),
        "human": {"file": HUMAN_FILE, "pairs": len(human.by_pair), "verdicts": _counts(human)},
        "rules": RULE_TITLES,
        "judges": judges,
        "published": {"fdt_percent": PUBLISHED, "source": SOURCE},
        "ceiling": None,
        "ceiling_note": "one human verdict per pair: OpenING publishes no inter-rater agreement to compare with",
    }


def lines(result: dict[str, Any]) -> list[str]:
    """The printed table: one line per judge and rule, the published FDT figure beside ours."""
    human = result["human"]
    out = [f"OpenING: {human['pairs']} human pairwise verdicts {human['verdicts']}"]
    for name, judge in result["judges"].items():
        out.append(f"{name} ({judge['shared_pairs']} shared pairs, file {judge['file']}):")
        for rule in RULES:
            entry = judge["rules"][rule]
            value = "-" if entry["agreement"] is None else f"{entry['agreement']:.2f}%"
            note = ""
            if rule == "fdt" and judge.get("published_fdt") is not None:
                note = f"  (published {judge['published_fdt']:.2f}%)"
            agree = f"{entry['agree']:g}"
            out.append(f"  {RULE_TITLES[rule]:<26} {value:>8}  {agree}/{entry['pairs']} pairs{note}")
    return out

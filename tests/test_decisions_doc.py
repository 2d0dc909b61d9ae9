"""docs/decisions.md keeps its own rules: every decision has a status line, and the contents list names every
decision under its topic (code and docs cite the IDs, so a missing one is a broken reference)."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).parents[1] / "docs" / "decisions.md"
HEADING = re.compile(r"^### (D[0-9]+[a-z]?(?:\.[0-9]+)?)\. ")
STATUS = re.compile(r"^Status: (accepted|amended by|superseded by)")


def decisions() -> dict[str, list[tuple[str, list[str]]]]:
    """Topic → [(decision ID, the lines after its heading up to the next heading)]."""
    topics: dict[str, list[tuple[str, list[str]]]] = {}
    topic = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## ") and line != "## Contents":
            topic = line[3:]
            topics[topic] = []
        elif (m := HEADING.match(line)) and topic:
            topics[topic].append((m.group(1), []))
        elif topic and topics[topic]:
            topics[topic][-1][1].append(line)
    return topics


def test_every_decision_says_whether_it_stands() -> None:
    found = decisions()
    assert sum(len(v) for v in found.values()) > 40  # the parse found the entries
    no_status = [d for entries in found.values() for d, body in entries
                 if not any(STATUS.match(line) for line in body if line.strip())]
    first_lines = {d: next((line for line in body if line.strip()), "") for entries in found.values()
                   for d, body in entries}
    assert not no_status, {d: first_lines[d][:80] for d in no_status}
    late = [d for d, line in first_lines.items() if not STATUS.match(line)]
    assert not late, f"the status line comes first under the heading: {late}"


def test_the_contents_list_names_every_decision_under_its_topic() -> None:
    text = DOC.read_text()
    contents = text[text.index("## Contents"):text.index("\n## ", text.index("## Contents") + 1)]
    listed = {m.group(1): set(re.findall(r"D[0-9]+[a-z]?(?:\.[0-9]+)?", m.group(2)))
              for m in re.finditer(r"^- \[([^\]]+)\]\([^)]*\): (.*)$", contents, re.MULTILINE)}
    want = {topic: {d for d, _ in entries} for topic, entries in decisions().items()}
    assert listed == want

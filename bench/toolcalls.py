"""What reading tool calls costs the service per answer: prompt rendering, one-shot and streamed parsing.

For each family, a two-turn request is rendered, and an answer holding one call whose arguments are
about 300 B, 3 kB and 30 kB is parsed at once and streamed in 4-character pieces (about one token
each). Prints milliseconds per answer, the streamed/one-shot ratio, and microseconds per streamed
piece, which must stay flat as the arguments grow (the parser resumes, it does not reread).
Usage: python3 bench/toolcalls.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the service package as the layer ships it (it is not installed on the build host)
sys.path.insert(0, str(ROOT / "layers/meta-edge-llm/recipes-ai/edge-llm-serve/files"))
from edge_llm_serve import toolcalls as tc  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "write_note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
REQUEST = {"tools": TOOLS, "messages": [
    {"role": "user", "content": "Note this down."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_note", "arguments": '{"text": "hi"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "saved"}]}
WRAP = {"qwen2.5": ("<tool_call>\n", "\n</tool_call>"), "nemotron-nano": ("<TOOLCALL>[", "]</TOOLCALL>"),
        "llama3.1": ("", "")}


def _best(fn, n: int = 5) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main() -> None:
    req = tc.prepare(REQUEST)
    print(f"{'family':14} {'answer':>8} {'render ms':>9} {'one-shot ms':>11} {'stream ms':>9} {'ratio':>6} "
          f"{'us/piece':>8}")
    for family, (head, tail) in WRAP.items():
        render = _best(lambda: tc.render(family, req))  # noqa: B023 - measured at once
        for size in (300, 3000, 30000):
            key = "parameters" if family == "llama3.1" else "arguments"
            call = json.dumps({"name": "write_note", key: {"text": "note " * (size // 5)}})
            text = head + call + tail

            def stream(text: str = text, family: str = family) -> None:
                p = tc.parser(family, req)
                for i in range(0, len(text), 4):
                    p.feed(text[i:i + 4])
                p.finish()

            one = _best(lambda: tc.parse_output(family, text, req))  # noqa: B023
            st = _best(stream)
            pieces = (len(text) + 3) // 4
            print(f"{family:14} {len(text):>7}B {render * 1e3:>9.3f} {one * 1e3:>11.3f} {st * 1e3:>9.2f} "
                  f"{st / one:>6.0f} {st / pieces * 1e6:>8.1f}")


if __name__ == "__main__":
    main()

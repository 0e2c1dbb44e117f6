"""GET /metrics: counters and histograms in the Prometheus text format, written by the service itself."""

from __future__ import annotations

import threading
from typing import Any

# ---------------------------------------------------------------------------------------------
# Metrics in the Prometheus text exposition format (written here: the image's Python has no
# prometheus_client; the format is https://prometheus.io/docs/instrumenting/exposition_formats/)
# ---------------------------------------------------------------------------------------------

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DECODE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 75.0, 100.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def backend_info(backend: dict[str, Any]) -> dict[str, tuple[str, float]]:
    """The info gauge naming the configured backend and the one the runtime reported ("unknown" when it
    did not say); accelerator_warnings=1 when the runtime warned that an accelerator did not load."""
    name = (f'edge_llm_backend_info{{configured="{_label(str(backend["configured"]))}",'
            f'runtime="{_label(str(backend["runtime"] or "unknown"))}",'
            f'accelerator_warnings="{1 if backend["runtime_said"] else 0}"}}')
    return {name: ("The backend configured and the one the runtime reported using.", 1)}


class Metrics:
    """Counters, gauges and two histograms, rendered as Prometheus text; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = {}
        self.errors: dict[str, int] = {}
        self.cancelled = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.hist = {"ttft": [0] * (len(TTFT_BUCKETS) + 1) + [0.0], "decode": [0] * (len(DECODE_BUCKETS) + 1) + [0.0]}

    def request(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def observe(self, name: str, value: float) -> None:
        buckets = TTFT_BUCKETS if name == "ttft" else DECODE_BUCKETS
        with self._lock:
            h = self.hist[name]
            for i, le in enumerate(buckets):
                if value <= le:
                    h[i] += 1
            h[len(buckets)] += 1          # +Inf (== count)
            h[-1] += value                # sum

    def tokens(self, prompt: int, generated: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generated_tokens += generated

    def render(self, gauges: dict[str, tuple[str, float]]) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])

        with self._lock:
            family("edge_llm_requests_total", "counter", "HTTP requests by endpoint and status code.")
            for (ep, st), n in sorted(self.requests.items()):
                out.append(f'edge_llm_requests_total{{endpoint="{_label(ep)}",status="{st}"}} {n}')
            family("edge_llm_prompt_tokens_total", "counter", "Prompt tokens processed.")
            out.append(f"edge_llm_prompt_tokens_total {self.prompt_tokens}")
            family("edge_llm_generated_tokens_total", "counter", "Tokens generated.")
            out.append(f"edge_llm_generated_tokens_total {self.generated_tokens}")
            family("edge_llm_cancelled_total", "counter", "Generations cancelled because the client went away.")
            out.append(f"edge_llm_cancelled_total {self.cancelled}")
            family("edge_llm_runtime_errors_total", "counter", "Runtime errors by kind.")
            for kind, n in sorted(self.errors.items()):
                out.append(f'edge_llm_runtime_errors_total{{kind="{_label(kind)}"}} {n}')
            for name, key, buckets, help_text in (
                    ("edge_llm_time_to_first_token_seconds", "ttft", TTFT_BUCKETS,
                     "Time from the start of generation to the first token."),
                    ("edge_llm_decode_tokens_per_second", "decode", DECODE_BUCKETS, "Decode speed per request.")):
                family(name, "histogram", help_text)
                h = self.hist[key]
                for i, le in enumerate(buckets):
                    out.append(f'{name}_bucket{{le="{le}"}} {h[i]}')
                out.append(f'{name}_bucket{{le="+Inf"}} {h[len(buckets)]}')
                out.append(f"{name}_sum {h[-1]}")
                out.append(f"{name}_count {h[len(buckets)]}")
        for name, (help_text, value) in gauges.items():
            family(name.split("{", 1)[0], "gauge", help_text)      # a gauge may carry its labels
            out.append(f"{name} {value}")
        return "\n".join(out) + "\n"

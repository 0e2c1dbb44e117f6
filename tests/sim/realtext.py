"""What a virtual IQ-8275 board's service answers where it runs Google's real runtime.

The boards' stand-in library takes its words from the real liblitert-lm.so on the tiny model
(provisioner.sim.real_litert); tests compute the expected answer here with Google's own Python
binding, never with the simulator's code, so the two must agree on their own.
"""

from __future__ import annotations

from provisioner.sim import real_litert


def real_completion(prompt: str, max_tokens: int) -> str | None:
    """The runtime's raw completion (no chat template) of ``prompt`` in ``max_tokens`` tokens, or None
    where the boards answer with modelled text (no litert-lm-api 0.12.0 or no tiny model here)."""
    found = real_litert.locate()
    if isinstance(found, str):
        return None
    import litert_lm
    engine = litert_lm.Engine(str(found[1]), backend=litert_lm.Backend.CPU(), cache_dir=":nocache")
    with engine.create_session(apply_prompt_template=False, max_output_tokens=max_tokens) as session:
        session.run_prefill([prompt])
        text = session.run_decode().texts[0]
    del engine                      # sessions before the engine: an engine closed first aborts the process
    return text

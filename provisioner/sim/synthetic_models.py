"""Synthetic but *real-format* model artifacts for tests, benchmarks and rehearsals.

There is no NPU and no 3 GB download here, so we build the smallest files that have the exact
structure the inspector, the layer and the runtime stand-ins rely on:

* ``make_litertlm``: a genuine ``.litertlm`` container written by the official
  ``litert-lm-builder`` (header flatbuffer, 16 KiB aligned sections, LLM metadata, HF tokenizer,
  TFLite model sections). The NPU section is a real TFLite flatbuffer (built with the ``tflite``
  schema package) whose only operator is a custom ``DISPATCH_OP`` with flexbuffer options
  ``bytecode_offset``/``bytecode_size`` pointing at a fake QNN context binary appended after the
  flatbuffer - exactly where LiteRT puts the real one, with the QAIRT build id as ``v<build>``
  text inside. ``pad_to`` pushes that context binary to the end of a sparse file of that size,
  like the 3.3 GB Gemma-4 E2B file, while occupying only a few KiB on disk.
* ``make_genie_bundle``: an AI Hub style Genie export folder (ctx-bin parts, genie_config.json,
  htp_backend_ext_config.json, tokenizer, tool-versions.yaml).

Only tests, ``bench/`` and the simulator import this module; production code never does.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

import flatbuffers
from flatbuffers import flexbuffers

DISPATCH_OP = "DISPATCH_OP"
CONTEXT_BINARY_SIZE = 8192
BUILD_ID_AT = 0x1A0  # where the build id text sits inside the fake context binary
_TFLITE_CUSTOM = 32  # tflite BuiltinOperator.CUSTOM
_FLEXBUFFERS = 0  # tflite CustomOptionsFormat.FLEXBUFFERS


def fake_context_binary(qairt: str, *, size: int = CONTEXT_BINARY_SIZE, soc_model: int | None = None,
                        time_digits: str = "154327") -> bytes:
    """A stand-in QNN context binary: binary header, then the ``v<build>`` text QAIRT embeds.

    The trailing time digits mimic real ids (``v2.45.0.260326154327``) so readers must normalize.
    """
    head = b"\x00\x00\x00\x02QNNCTX\x00\x01" + os.urandom(16)
    text = f"v{qairt}{time_digits}\x00".encode()
    if soc_model is not None:
        text += f"socModel={soc_model}\x00".encode()
    body = head.ljust(BUILD_ID_AT, b"\x00") + text
    return body.ljust(max(size, len(body)), b"\xa5")


def tflite_with_dispatch_ops(bytecodes: list[tuple[int, int]], *, name: str = "main") -> bytes:
    """A TFLite flatbuffer whose subgraph runs one ``DISPATCH_OP`` per ``(offset, size)``.

    Offsets are relative to the start of the TFLite data (this flatbuffer), as LiteRT writes them.
    """
    import tflite as T  # generated TFLite schema; prefixed builder functions live at package level

    b = flatbuffers.Builder(1024)
    n = len(bytecodes)
    # tensors: one input, one output per op (chained), all float32 [1]
    tensor_offsets = []
    for i in range(n + 1):
        tname = b.CreateString(f"t{i}")
        T.TensorStartShapeVector(b, 1)
        b.PrependInt32(1)
        shape = b.EndVector()
        T.TensorStart(b)
        T.TensorAddShape(b, shape)
        T.TensorAddType(b, 0)
        T.TensorAddBuffer(b, 0)
        T.TensorAddName(b, tname)
        tensor_offsets.append(T.TensorEnd(b))
    ops = []
    for i, (off, size) in enumerate(bytecodes):
        opts = bytes(flexbuffers.Dumps({"bytecode_offset": off, "bytecode_size": size, "name": f"qnn_partition_{i}"}))
        custom = b.CreateByteVector(opts)
        T.OperatorStartInputsVector(b, 1)
        b.PrependInt32(i)
        ins = b.EndVector()
        T.OperatorStartOutputsVector(b, 1)
        b.PrependInt32(i + 1)
        outs = b.EndVector()
        T.OperatorStart(b)
        T.OperatorAddOpcodeIndex(b, 0)
        T.OperatorAddInputs(b, ins)
        T.OperatorAddOutputs(b, outs)
        T.OperatorAddCustomOptions(b, custom)
        T.OperatorAddCustomOptionsFormat(b, _FLEXBUFFERS)
        ops.append(T.OperatorEnd(b))

    def vec_of_offsets(start_fn, items):
        start_fn(b, len(items))
        for item in reversed(items):
            b.PrependUOffsetTRelative(item)
        return b.EndVector()

    tensors_v = vec_of_offsets(T.SubGraphStartTensorsVector, tensor_offsets)
    ops_v = vec_of_offsets(T.SubGraphStartOperatorsVector, ops)
    T.SubGraphStartInputsVector(b, 1)
    b.PrependInt32(0)
    sg_in = b.EndVector()
    T.SubGraphStartOutputsVector(b, 1)
    b.PrependInt32(n)
    sg_out = b.EndVector()
    sg_name = b.CreateString(name)
    T.SubGraphStart(b)
    T.SubGraphAddTensors(b, tensors_v)
    T.SubGraphAddInputs(b, sg_in)
    T.SubGraphAddOutputs(b, sg_out)
    T.SubGraphAddOperators(b, ops_v)
    T.SubGraphAddName(b, sg_name)
    subgraph = T.SubGraphEnd(b)

    code = b.CreateString(DISPATCH_OP)
    T.OperatorCodeStart(b)
    T.OperatorCodeAddDeprecatedBuiltinCode(b, _TFLITE_CUSTOM)
    T.OperatorCodeAddBuiltinCode(b, _TFLITE_CUSTOM)
    T.OperatorCodeAddCustomCode(b, code)
    T.OperatorCodeAddVersion(b, 1)
    opcode = T.OperatorCodeEnd(b)

    T.BufferStart(b)
    empty_buffer = T.BufferEnd(b)

    opcodes_v = vec_of_offsets(T.ModelStartOperatorCodesVector, [opcode] if n else [])
    subgraphs_v = vec_of_offsets(T.ModelStartSubgraphsVector, [subgraph])
    buffers_v = vec_of_offsets(T.ModelStartBuffersVector, [empty_buffer])
    desc = b.CreateString("synthetic NPU model (edge-llm provisioner test artifact)")
    T.ModelStart(b)
    T.ModelAddVersion(b, 3)
    T.ModelAddOperatorCodes(b, opcodes_v)
    T.ModelAddSubgraphs(b, subgraphs_v)
    T.ModelAddDescription(b, desc)
    T.ModelAddBuffers(b, buffers_v)
    b.Finish(T.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def tflite_plain() -> bytes:
    """A TFLite flatbuffer with no custom ops (a CPU/GPU section: embedder and the like)."""
    return tflite_with_dispatch_ops([])


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to


def _npu_tflite_writer(qairt: str, pad_to: int | None, n_ops: int, ctx_size: int):
    """Section writer for the NPU TFLite section; placed last so ``pad_to`` can move the context binary.

    The bytecode offset depends on where the builder starts the section, so the flatbuffer is
    built at write time. With ``pad_to`` the gap before the context binary is a sparse hole.
    """
    ctx = fake_context_binary(qairt, size=ctx_size)

    def writer(stream: BinaryIO) -> None:
        begin = stream.tell()
        # Size of the flatbuffer does not depend on offset magnitudes enough to matter: build once
        # with a guess, then rebuild with the real offsets (flexbuffer widths may differ).
        guess = tflite_with_dispatch_ops([(1 << 40, len(ctx))] * n_ops)
        if pad_to is not None:
            ctx_off = pad_to - begin - len(ctx)
            if ctx_off < _align(len(guess)) + 64:
                raise ValueError(f"pad_to={pad_to} is too small for this model")
        else:
            ctx_off = _align(len(guess) + 64)
        # all DISPATCH_OPs of the section share one context binary (weight sharing)
        fb = tflite_with_dispatch_ops([(ctx_off, len(ctx))] * n_ops)
        assert len(fb) <= ctx_off
        stream.write(fb)
        stream.seek(begin + ctx_off)
        stream.write(ctx)

    return writer


def make_litertlm(path: str | Path, qairt: str = "2.44.0.260225", *, pad_to: int | None = None,
                  npu_only: bool = True, truncate_to: int | None = None, context: int = 4096,
                  n_dispatch_ops: int = 2, context_binary_size: int = CONTEXT_BINARY_SIZE,
                  model_type: str | None = "gemma4") -> Path:
    """Write a real ``.litertlm`` with an NPU ``DISPATCH_OP`` section carrying ``v<qairt>``.

    ``pad_to``: total file size (sparse; e.g. 3_294_593_024 like Gemma-4 E2B) with the context
    binary at the very end. ``npu_only=False`` adds an embedder section allowed on CPU/GPU.
    ``truncate_to``: cut the finished file, like an interrupted download. ``model_type``: the LlmMetadata
    ``llm_model_type`` member it names (Gemma 4's by default, the processor LiteRT-LM picks for a Gemma-4
    file: model_data_processor_factory.cc:348 at cbf463d; None: the field is left out).
    """
    from litert_lm_builder import litertlm_builder as lb
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="synthetic-litertlm-") as tmp:
        t = Path(tmp)
        meta = llm_metadata_pb2.LlmMetadata()
        meta.max_num_tokens = context
        meta.start_token.token_ids.ids.append(2)
        meta.stop_tokens.add().token_ids.ids.append(1)
        if model_type:
            getattr(meta.llm_model_type, model_type).SetInParent()
        (t / "llm_metadata.pb").write_bytes(meta.SerializeToString())
        (t / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}))
        (t / "embedder.tflite").write_bytes(tflite_plain())
        (t / "npu.tflite").write_bytes(tflite_with_dispatch_ops([(0, 0)]))  # replaced at write time

        builder = lb.LitertLmFileBuilder()
        builder.add_system_metadata(lb.Metadata(key="Authors", value="edge-llm provisioner (synthetic)",
                                                dtype=lb.DType.STRING))
        builder.add_llm_metadata(str(t / "llm_metadata.pb"))
        builder.add_hf_tokenizer(str(t / "tokenizer.json"))
        builder.add_tflite_model(str(t / "embedder.tflite"), lb.TfLiteModelType.EMBEDDER,
                                 backend_constraint="npu" if npu_only else "cpu,gpu")
        builder.add_tflite_model(str(t / "npu.tflite"), lb.TfLiteModelType.PREFILL_DECODE, backend_constraint="npu")
        sections = getattr(builder, "_sections", None)
        if not sections or not hasattr(sections[-1], "data_writer"):
            raise RuntimeError("litert-lm-builder changed its section list; update synthetic_models.make_litertlm")
        sections[-1].data_writer = _npu_tflite_writer(qairt, pad_to, n_dispatch_ops, context_binary_size)

        tmp_out = path.with_name(path.name + ".tmp")
        with open(tmp_out, "wb") as f:
            builder.build(f)
        if truncate_to is not None:
            os.truncate(tmp_out, truncate_to)
        os.replace(tmp_out, path)
    return path


def make_genie_bundle(dir: str | Path, *, soc_model: int = 77, dsp_arch: str = "v73",
                      qairt_full: str = "2.45.0.260326154327", parts: int = 5, part_size: int = 4096,
                      missing: Iterable[str | int] = (), with_ext_config: bool = True,
                      model_id: str = "nemotron_nano_8b", context: int = 4096,
                      perf_profile: str = "burst") -> Path:
    """Write an AI Hub style Genie export folder at ``dir``.

    ``missing``: part numbers (``3``) or file names (``"tokenizer.json"``) to leave out, to
    reproduce incomplete copies. ``soc_model=0`` reproduces a generic compile (no soc_model).
    """
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    skip = {f"{model_id}_part_{m}_of_{parts}.bin" if isinstance(m, int) else str(m) for m in missing}
    build = qairt_full[:-6] if len(qairt_full.split(".")[-1]) > 6 else qairt_full
    ctx_bins = [f"{model_id}_part_{i}_of_{parts}.bin" for i in range(1, parts + 1)]
    for name in ctx_bins:
        if name not in skip:
            (d / name).write_bytes(fake_context_binary(build, size=part_size, soc_model=soc_model,
                                                       time_digits=qairt_full[len(build):]))
    config = {"dialog": {
        "version": 1, "type": "basic",
        "context": {"version": 1, "size": context, "n-vocab": 128256, "bos-token": 128000,
                    "eos-token": [128001, 128008, 128009]},
        "sampler": {"version": 1, "seed": 42, "temp": 0.8, "top-k": 40, "top-p": 0.95},
        "tokenizer": {"version": 1, "path": "tokenizer.json"},
        "engine": {"version": 1, "n-threads": 3, "backend": {
            "version": 1, "type": "QnnHtp",
            "QnnHtp": {"version": 1, "use-mmap": True, "spill-fill-bufsize": 0, "mmap-budget": 0, "poll": True,
                       "cpu-mask": "0xe0", "kv-dim": 128, "allow-async-init": False},
            "extensions": "htp_backend_ext_config.json"},
            "model": {"version": 1, "type": "binary", "binary": {"version": 1, "ctx-bins": ctx_bins},
                      "positional-encoding": {"type": "rope", "rope-dim": 64, "rope-theta": 500000,
                                              "rope-scaling": {"rope-type": "llama3", "factor": 8.0}}}}}}
    files = {
        "genie_config.json": json.dumps(config, indent=2),
        "htp_backend_ext_config.json": json.dumps({
            "devices": [{"soc_model": soc_model, "dsp_arch": dsp_arch,
                         "cores": [{"core_id": 0, "perf_profile": perf_profile, "rpc_control_latency": 100}]}],
            "memory": {"mem_type": "shared_buffer"}, "context": {"weight_sharing_enabled": True}}, indent=2),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}),
        "tool-versions.yaml": f"qairt: {qairt_full}\nonnx: 1.17.0\nonnx_runtime: 1.20.0\ntflite: 2.18.0\n"
                              "ai_hub_models: 0.30.0\n",
        "metadata.yaml": f"model_id: {model_id}\nruntime: genie\nprecision: w4a16\n",
    }
    if not with_ext_config:
        skip.add("htp_backend_ext_config.json")
    for name, text in files.items():
        if name not in skip:
            (d / name).write_text(text)
    return d

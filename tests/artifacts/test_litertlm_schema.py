"""The inspector's own wire-format readers against the installed schema packages.

``provisioner.artifacts.litertlm`` reads the LiteRT-LM header, the TFLite model and the LLM
metadata with small ``struct`` readers (so ``provisioner inspect`` starts without numpy/absl/
protobuf). Their slot and field numbers were taken from the generated code in
``litert-lm-builder`` and ``tflite``; these tests re-derive them from the installed packages, so
an upgrade that moves a field fails here instead of silently misreading real models.
"""

from __future__ import annotations

import inspect
import random
import re

import pytest
import tflite
from flatbuffers import flexbuffers
from litert_lm_builder import litertlm_core as core
from litert_lm_builder import litertlm_header_schema_py_generated as header
from litert_lm_builder.runtime.proto import llm_metadata_pb2, llm_model_type_pb2

from provisioner.artifacts import litertlm as L
from provisioner.artifacts import wire_formats as W


def _slot(cls: type, accessor: str) -> int:
    """Field slot of a generated flatbuffer accessor: it reads ``self._tab.Offset(4 + 2 * slot)``."""
    src = inspect.getsource(getattr(cls, accessor))
    return (int(re.search(r"\.Offset\((\d+)\)", src).group(1)) - 4) // 2


def test_container_constants_match_litertlm_core():
    assert L.MAGIC == core.HEADER_MAGIC_BYTES
    assert L.MAJOR_VERSION == core.LITERTLM_MAJOR_VERSION
    assert L.HEADER_BEGIN == core.HEADER_BEGIN_BYTE_OFFSET
    assert L.HEADER_END_AT == core.HEADER_END_LOCATION_BYTE_OFFSET


@pytest.mark.parametrize("cls,accessor,slot", [
    (header.LiteRTLMMetaData, "SystemMetadata", L.HDR_SYSTEM_METADATA),
    (header.LiteRTLMMetaData, "SectionMetadata", L.HDR_SECTION_METADATA),
    (header.SystemMetadata, "Entries", L.SYSTEM_ENTRIES),
    (header.SectionMetadata, "Objects", L.SECTIONS_OBJECTS),
    (header.SectionObject, "Items", L.SECTION_ITEMS),
    (header.SectionObject, "BeginOffset", L.SECTION_BEGIN),
    (header.SectionObject, "EndOffset", L.SECTION_END),
    (header.SectionObject, "DataType", L.SECTION_DATA_TYPE),
    (header.KeyValuePair, "Key", L.KV_KEY),
    (header.KeyValuePair, "ValueType", L.KV_VALUE_TYPE),
    (header.KeyValuePair, "Value", L.KV_VALUE),
    (tflite.Model, "OperatorCodes", L.MODEL_OPERATOR_CODES),
    (tflite.Model, "Subgraphs", L.MODEL_SUBGRAPHS),
    (tflite.OperatorCode, "CustomCode", L.OPCODE_CUSTOM_CODE),
    (tflite.SubGraph, "Operators", L.SUBGRAPH_OPERATORS),
    (tflite.Operator, "OpcodeIndex", L.OPERATOR_OPCODE_INDEX),
    (tflite.Operator, "CustomOptions", L.OPERATOR_CUSTOM_OPTIONS),
])
def test_flatbuffer_slots_match_generated_code(cls, accessor, slot):
    assert _slot(cls, accessor) == slot


def test_header_unions_and_section_types_match_schema():
    members = {v: k for k, v in vars(header.VData).items() if not k.startswith("_") and k != "NONE"}
    assert {k: name for k, (name, _) in L.VDATA.items()} == members
    for name, _ in L.VDATA.values():  # every VData member is a one-field table, field slot 0
        assert _slot(getattr(header, name), "Value") == 0
    types = {v: k for k, v in vars(header.AnySectionDataType).items() if not k.startswith("_")}
    assert types == L.SECTION_TYPES


def test_llm_metadata_field_numbers_match_proto():
    fields = llm_metadata_pb2.LlmMetadata.DESCRIPTOR.fields_by_name
    assert fields["max_num_tokens"].number == L.LLM_MAX_NUM_TOKENS
    assert fields["llm_model_type"].number == L.LLM_MODEL_TYPE
    assert fields["jinja_prompt_template"].number == L.LLM_JINJA_TEMPLATE
    assert fields["supports_thinking"].number == L.LLM_SUPPORTS_THINKING
    assert fields["supports_function_calling"].number == L.LLM_SUPPORTS_FUNCTION_CALLING
    assert fields["min_runtime_version"].number == L.LLM_MIN_RUNTIME_VERSION
    oneof = llm_model_type_pb2.LlmModelType.DESCRIPTOR.oneofs_by_name["model_type"]
    known = {f.number: f.name for f in oneof.fields}
    # names this reader knows must be right; newer members are looked up in the schema at run time
    assert {n: known[n] for n in L.LLM_MODEL_TYPES} == L.LLM_MODEL_TYPES
    assert all(L._model_type_name(n) == name for n, name in known.items())


@pytest.mark.parametrize("opts", [
    {"bytecode_offset": 4096, "bytecode_size": 8192, "name": "qnn_partition_0"},
    {"bytecode_offset": 3_294_000_000, "bytecode_size": 1 << 33, "name": "wide"},
    {"bytecode_offset": -7, "bytecode_size": 0, "name": ""},
    {"bytecode_offset": 1.5, "flag": True, "nothing": None, "name": "ünïcode"},
])
def test_flexbuffer_map_reader_agrees_with_flatbuffers(opts):
    raw = bytes(flexbuffers.Dumps(opts))
    assert W.flex_map(raw) == flexbuffers.Loads(raw)


def test_flexbuffer_nested_values_are_skipped_not_followed():
    raw = bytes(flexbuffers.Dumps({"bytecode_offset": 64, "shape": [1, 2, 3], "sub": {"a": 1}}))
    assert W.flex_map(raw) == {"bytecode_offset": 64, "shape": None, "sub": None}
    assert W.flex_map(bytes(flexbuffers.Dumps([1, 2]))) == {}  # not a map: no options


def test_flexbuffer_garbage_is_corrupt_never_a_crash():
    good = bytes(flexbuffers.Dumps({"bytecode_offset": 4096, "bytecode_size": 8192, "name": "qnn_partition_0"}))
    rng = random.Random(2)
    for _ in range(300):
        bad = bytearray(good)
        for _ in range(rng.choice((1, 2, 3))):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            W.flex_map(bytes(bad))
        except W.Corrupt:
            pass

"""Checks acpx's interchange exports with the other side's own code (the tests' peer).

  check_interchange.py atif FILE          Harbor's TrajectoryValidator and Trajectory model
  check_interchange.py otlp FILE [--turn] OpenTelemetry's protobuf schema (opentelemetry-proto)

Prints one JSON object that summarizes what the checker read (the Rust test asserts on it)
and exits 1 with the checker's errors when the file is not valid. Installed with its
packages by scripts/install-interop-peer.sh into .venv-acp/.
"""

import base64
import json
import sys


def check_atif(path):
    from harbor.models.trajectories import Trajectory
    from harbor.utils.trajectory_validator import TrajectoryValidator

    validator = TrajectoryValidator()
    if not validator.validate(path):
        print(json.dumps({"valid": False, "errors": validator.errors}))
        return 1
    with open(path) as f:
        t = Trajectory.model_validate(json.load(f))
    steps = []
    for s in t.steps:
        steps.append(
            {
                "source": s.source,
                "message": s.message if isinstance(s.message, str) else None,
                "reasoning": s.reasoning_content,
                "model": s.model_name,
                "tool_calls": [
                    {"id": c.tool_call_id, "name": c.function_name, "arguments": c.arguments}
                    for c in (s.tool_calls or [])
                ],
                "results": [
                    {"call": r.source_call_id, "content": r.content if isinstance(r.content, str) else None}
                    for r in (s.observation.results if s.observation else [])
                ],
                "metrics": s.metrics.model_dump(exclude_none=True) if s.metrics else None,
            }
        )
    fm = t.final_metrics.model_dump(exclude_none=True) if t.final_metrics else None
    print(
        json.dumps(
            {
                "valid": True,
                "schema_version": t.schema_version,
                "session_id": t.session_id,
                "agent": t.agent.model_dump(exclude_none=True),
                "steps": steps,
                "final_metrics": fm,
            }
        )
    )
    return 0


def hex_ids_to_base64(value):
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects
    base64 (the one place the OTLP spec departs from it); convert before parsing."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64encode(bytes.fromhex(v)).decode()
            else:
                out[k] = hex_ids_to_base64(v)
        return out
    if isinstance(value, list):
        return [hex_ids_to_base64(v) for v in value]
    return value


def any_value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def check_otlp(path, turn_only):
    from google.protobuf.json_format import Parse, ParseError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    with open(path) as f:
        raw = json.load(f)
    errors = []
    try:
        req = Parse(json.dumps(hex_ids_to_base64(raw)), ExportTraceServiceRequest())
    except (ParseError, ValueError) as e:
        print(json.dumps({"valid": False, "errors": [str(e)]}))
        return 1
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    by_id = {s.span_id: s for s in spans}
    trace_ids = {s.trace_id for s in spans}
    if len(trace_ids) != 1:
        errors.append(f"{len(trace_ids)} trace ids, expected 1")
    summary = []
    for s in spans:
        if len(s.trace_id) != 16 or len(s.span_id) != 8:
            errors.append(f"span {s.name}: trace id of {len(s.trace_id)} bytes, span id of {len(s.span_id)}")
        if s.parent_span_id and s.parent_span_id not in by_id and not turn_only:
            errors.append(f"span {s.name}: parent {s.parent_span_id.hex()} is not in the trace")
        if s.end_time_unix_nano < s.start_time_unix_nano or s.start_time_unix_nano == 0:
            errors.append(f"span {s.name}: times {s.start_time_unix_nano}..{s.end_time_unix_nano}")
        parent = by_id.get(s.parent_span_id)
        summary.append(
            {
                "name": s.name,
                "parent": parent.name if parent else (None if not s.parent_span_id else "<outside>"),
                "kind": s.kind,
                "status": s.status.code,
                "status_message": s.status.message,
                "attributes": {a.key: any_value(a.value) for a in s.attributes},
            }
        )
    roots = [s for s in spans if not s.parent_span_id]
    if not turn_only and len(roots) != 1:
        errors.append(f"{len(roots)} root spans, expected 1")
    if errors:
        print(json.dumps({"valid": False, "errors": errors}))
        return 1
    resource = {a.key: any_value(a.value) for a in req.resource_spans[0].resource.attributes}
    print(
        json.dumps(
            {
                "valid": True,
                "trace_id": next(iter(trace_ids)).hex(),
                "resource": resource,
                "spans": summary,
            }
        )
    )
    return 0


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("atif", "otlp"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "atif":
        return check_atif(sys.argv[2])
    return check_otlp(sys.argv[2], "--turn" in sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())

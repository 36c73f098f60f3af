"""Shares of a routine-served request's CPU time by stage, from folded perf stacks.

Reads the output of `inferno-collapse-perf` (one line per stack: frames from the root to the
leaf joined by `;`, then a sample count) and gives each sample to the stage of its innermost
frame that names one. The load generators (`wrk`, and the in-process client: reqwest and hyper's) are counted
apart and left out of the server's shares. Frames are matched by name, so the split is
approximate where one function serves two stages (hyper's connection task reads requests and
writes replies); compiled WebAssembly (anonymous memory, or a mapped `.cwasm`) has no symbols
and counts as the routine's run.

Usage: python3 scripts/python/profile_stages.py FOLDED [FOLDED ...]
"""

import re
import sys

# (stage, frame pattern), tried from the leaf toward the root; the first stage matched wins.
STAGES = [
    ("compiling routines (start-up)", r"cranelift|regalloc2|wasmtime_environ::compile|"
                                      r"Compiler.*compile|JsBuilder|componentize"),
    ("ledger", r"agora_store::|sqlx|sqlite3|libsqlite"),
    ("tool call", r"agora_node::tools::|agora_testkit::.*weather|call_tool|ToolHost"),
    ("instantiate", r"InstancePre.*instantiate|instance::allocator|pooling|Store.*::new|"
                    r"WasiCtxBuilder|request_randomness|sha2::|pagemap|vm::instance::Instance::new|"
                    r"Instantiator|OwnedImports|ModuleRegistry|lookup_vmdef|funcref|func_loc|"
                    r"StoreOpaque|StoreInner|Slab|text_range|store_code|"
                    r"LoadedRoutine>::run"),
    ("run", r"call_handle|wasmtime::runtime::func|wasmtime_wasi|\[unknown\]|wasm-function|"
            r"wasmtime::runtime::component::func|perf-\d+\.map|trampoline|\.cwasm\]"),
    ("PD and routine lookup", r"RoutineTable|routine_table|admission|idempotency_key_in|"
                              r"idempotency_field"),
    ("edge checks", r"agora_server::edge|governor|check_rate|identify|idempotency::claim|"
                    r"idempotency::settle|metrics::count_request"),
    ("reply", r"Reply.*to_json|serde_json::ser|into_response|role::Server.*encode|"
              r"Buffered.*poll_flush|writev|sendto|sendmsg|__write"),
    ("accept and parse", r"role::Server.*parse|serde_json::de|from_json|read_json|"
                         r"http_body_util|Buffered.*poll_read|recvfrom|__read|accept|"
                         r"axum::routing|httparse"),
    ("record and answer (node)", r"agora_node::"),
]
CLIENT = re.compile(r"^wrk$|reqwest::|hyper_util::client|hyper::client|drive::")
COMPILED = [(stage, re.compile(pattern)) for stage, pattern in STAGES]
OTHER = "runtime, kernel and the rest"


def stage_of(frames):
    for frame in reversed(frames):
        for stage, pattern in COMPILED:
            if pattern.search(frame):
                return stage
    return OTHER


def main(paths):
    for path in paths:
        counts = {}
        client = 0
        with open(path, encoding="utf-8", errors="replace") as folded:
            for line in folded:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                if not count.isdigit():
                    continue
                frames = stack.split(";")
                if any(CLIENT.search(frame) for frame in frames):
                    client += int(count)
                    continue
                stage = stage_of(frames)
                counts[stage] = counts.get(stage, 0) + int(count)
        startup = counts.pop(STAGES[0][0], 0)
        server = sum(counts.values())
        print(f"{path}: {server} server samples; left out: {client} of the in-process client, "
              f"{startup} of compiling routines at start-up")
        for stage in sorted(counts, key=lambda s: -counts[s]):
            print(f"  {stage:<28} {counts[stage] * 100 / max(server, 1):5.1f} %")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

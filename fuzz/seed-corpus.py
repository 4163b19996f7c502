#!/usr/bin/env python3
"""Writes fuzz/corpus/<target>/ from the recorded provider streams, the
example scripts and configurations, and the inputs the tests use. Run from
the repository root; the corpus is committed, rerun only to refresh it."""
import hashlib, json, pathlib

root = pathlib.Path(__file__).resolve().parent.parent
corpus = root / "fuzz" / "corpus"
fixtures = root / "crates" / "askloop-providers" / "tests" / "fixtures"

def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = corpus / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)

# Streams: the first byte picks the split points (see cuts_from_seed).
for sse in sorted(fixtures.glob("*/*.sse")):
    body = sse.read_bytes()
    target = "anthropic_stream" if sse.parent.name == "anthropic" else "openai_stream"
    for seed in (0, 7, 200):
        put(target, bytes([seed]) + body)
    put("sse_decoder", bytes([1]) + body)
put("sse_decoder", b"\x05\xef\xbb\xbfdata: a\r\n\r\ndata:b\rdata: c\n\n: ping\n\nevent: x\ndata\n\n")

deploy = {"question": "Which environment should I deploy to?",
          "options": [{"label": "staging"}, {"label": "production"}], "selectionMode": "single_select"}
ask_inputs = [
    deploy,
    {"question": "Which city?"},
    {"question": "Which toppings?", "options": [{"label": "cheese", "description": "more"}, {"label": "ham"}],
     "selectionMode": "multi_select"},
    {"question": "x", "selectionMode": "multi_select"},
    {"question": "x", "options": [{"label": "a"}, {"label": "a"}]},
    {"question": "x", "options": [{"label": " "}]},
    {"question": "", "options": []},
    {"question": "x", "extra": 1},
]
for value in ask_inputs:
    put("ask_user_input", json.dumps(value))
for answer, free in [("staging", False), ("prod", False), ("prod", True), (["staging"], False), ([], False),
                     (["staging", "staging"], False), (None, False), ("", False), ("  ", True), (3, False)]:
    put("answer_check", json.dumps([deploy, answer, free]))
multi = dict(deploy, selectionMode="multi_select")
for answer in (["staging", "production"], ["staging", 1], [" "], "staging"):
    put("answer_check", json.dumps([multi, answer, False]))
    put("answer_check", json.dumps([multi, answer, True]))
put("answer_check", json.dumps([{"question": "Why?"}, "because", False]))
put("answer_check", json.dumps([{"question": "Why?"}, " \n", False]))
put("answer_check", json.dumps([{"nothing": 1}, "a", False]))

for script in sorted((root / "examples").rglob("*.json")) + sorted((root / "crates").rglob("*script*.json")):
    put("script_file", script.read_bytes())
put("script_file", json.dumps({"turns": [{"toolCalls": [{"name": "ask_user", "args": deploy}]},
                                          {"text": "Deploying to {{toolResults}}. {{input}}"}]}))
put("script_file", json.dumps({"turns": [{"error": "boom"}]}))
put("script_file", json.dumps({"turns": [{"text": "ü€ {{toolResults}}", "toolCalls": [{"name": "nope"}]}]}))
put("script_file", json.dumps({"turns": []}))

for toml in sorted(root.rglob("askloop*.toml")):
    if "target" not in toml.parts and "fuzz" not in toml.parts:
        put("config_file", toml.read_bytes())
put("config_file", '[agents.assistant]\ninstructions = "Ask first."\ntools = ["ask_user"]\n')
put("config_file", '[agents.deployer]\nname = "Deployer"\ninstructions = "x"\ntools = ["ask_user", "write_file"]\n'
                   'require_approval = ["write_file"]\nallow_free_text = true\nmax_steps = 3\nwrite_dir = "out"\n'
                   'script = "deploy.json"\n')
put("config_file", '[agents.a]\ninstructions = "x"\nmodel = "openai/gpt-4o-mini"\n')
put("config_file", '[limits]\nmax_answer_bytes = 100\nmax_options = 4\nmax_questions_per_step = 2\n'
                   '[agents.a]\ninstructions = "x"\n')

routes = {  # index into ROUTES (crates/askloop-fuzz/src/server_bodies.rs)
    0: [{"messages": [{"role": "user", "content": "Deploy"}]}, {"messages": "Deploy"}, {"messages": []},
        {"messages": "x", "runId": "abc", "threadId": "t"}],
    1: [{"messages": "Deploy"}],
    2: [{"runId": "$RUN", "resumeData": "staging"}, {"runId": "$RUN", "resumeData": "nowhere"},
        {"runId": "$RUN", "toolCallId": "call_0_0", "resumeData": ["staging"]}, {"runId": "nope", "resumeData": "x"}],
    3: [{"runId": "$RUN", "resumeData": {"approved": True}}],
    4: [{"runId": "$RUN", "toolCallId": "call_0_0"}, {"runId": "$RUN"}],
    5: [{"runId": "$RUN"}],
    9: [{}, None],
}
for route, bodies in routes.items():
    for body in bodies:
        put("server_body", bytes([route]) + json.dumps(body).encode())
put("server_body", bytes([0]) + b"{\"messages\": ")
put("server_body", bytes([2]) + b"")

#!/usr/bin/env python3
"""Renders the chat-template golden cases with Python's jinja2, set up the way Hugging Face
transformers sets it up for apply_chat_template (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols, its tojson, raise_exception and strftime_now), and writes one JSON file per
tokenizer family: the rendered text of every case, or the error the template raised.

usage: chat_goldens.py TOKENIZERS_DIR OUT_DIR
(TOKENIZERS_DIR/<family>/tokenizer_config.json, as scripts/fetch-tokenizers.sh lays it out)
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

FAMILIES = ["llama3_1", "qwen3", "gemma3", "deepseek_v3"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the docs; returns <= 5 hits & their \"titles\"",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]

CASES = [
    {"name": "multi_turn_with_system", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": "You are a terse assistant. Answer in one line."},
        {"role": "user", "content": "What is a KV cache?"},
        {"role": "assistant", "content": "Stored attention keys and values of earlier tokens."},
        {"role": "user", "content": "  And why does routing care?\n"},
    ]},
    {"name": "tools", "add_generation_prompt": True, "tools": TOOLS, "messages": [
        {"role": "system", "content": "Use tools when they help."},
        {"role": "user", "content": "Weather in Zürich, in °C? Then search 'prefix caching'."},
    ]},
    {"name": "no_generation_prompt", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi!"},
    ]},
    {"name": "unicode_and_whitespace", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "naïve café — 東京 🙂\n\n  tabs\tand  spaces  "},
        {"role": "assistant", "content": "<think>\nweigh it\n</think>\n\nnoted."},
        {"role": "user", "content": "again?"},
    ]},
    {"name": "tool_result_turn", "add_generation_prompt": True, "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking."},
        {"role": "tool", "content": "{\"temp\": -3, \"unit\": \"c\"}"},
    ]},
    {"name": "roles_not_alternating", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ]},
]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    # tokenizer_config.json gives special tokens as strings or as AddedToken objects
    if isinstance(v, dict):
        return v.get("content")
    return v


def main(src, out):
    env = environment()
    os.makedirs(out, exist_ok=True)
    for family in FAMILIES:
        with open(os.path.join(src, family, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        template = config["chat_template"]
        if isinstance(template, list):
            template = {t["name"]: t["template"] for t in template}["default"]
        special = {k: token_text(config.get(k)) for k in
                   ("bos_token", "eos_token", "unk_token", "pad_token")}
        compiled = env.from_string(template)
        results = []
        for case in CASES:
            args = dict(special)
            args.update(messages=case["messages"], add_generation_prompt=case["add_generation_prompt"])
            if "tools" in case:
                args["tools"] = case["tools"]
            entry = {"name": case["name"], "add_generation_prompt": case["add_generation_prompt"],
                     "messages": case["messages"], "tools": case.get("tools")}
            try:
                entry["text"] = compiled.render(**args)
            except jinja2.exceptions.TemplateError as e:
                entry["error"] = str(e)
            results.append(entry)
        with open(os.path.join(out, family + ".json"), "w", encoding="utf-8") as f:
            json.dump({"family": family, "renderer": "python3-jinja2 " + jinja2.__version__,
                       "cases": results}, f, ensure_ascii=False, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

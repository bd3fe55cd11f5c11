#!/usr/bin/env python3
"""Renders chat templates with Python's jinja2 as Hugging Face does.

Reads {"cases": [{"template", "globals", "messages", "add_generation_prompt"}]}
on stdin and prints one JSON list: per case {"text": ...} or {"error": ...}.
The environment is transformers' (trim_blocks, lstrip_blocks, loopcontrols,
a sandbox, tojson without HTML escaping, raise_exception). Exit status 77
when jinja2 is not installed, so the caller can skip.
"""
import json
import sys

try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("python3-jinja2 is not installed", file=sys.stderr)
    sys.exit(77)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def main():
    request = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    out = []
    for case in request["cases"]:
        try:
            template = env.from_string(case["template"])
            text = template.render(messages=case["messages"], tools=None,
                                   documents=None,
                                   add_generation_prompt=case["add_generation_prompt"],
                                   **case["globals"])
            out.append({"text": text})
        except Exception as e:  # the template's own errors are results too
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()

"""Renders deploy/helm/gpubpf the way `helm template` does, for the subset of the template
language the chart keeps to (helm itself is not packaged by Debian or PyPI): actions
`{{ PIPELINE }}` with `{{-`/`-}}` whitespace trimming, `if`, `range` over a list (`.` the
item) and `end`; pipelines of `.Values.a.b`, `.Release.Name`, `.Release.Namespace`, `.`,
`toYaml X`, `| quote`, `| nindent N`, `| indent N`. Anything else is an error, so the chart
cannot grow past what this renders faithfully.

Usage: render_chart.py CHART RELEASE NAMESPACE OUT_DIR [KEY=YAML_VALUE]...
Writes OUT_DIR/<template> for each template (empty documents dropped).
"""
import os
import re
import sys

import yaml

ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def fail(msg):
    sys.exit(f"render_chart: {msg}")


def tokens(text):
    out, pos = [], 0
    for m in ACTION.finditer(text):
        lit = text[pos : m.start()]
        if m.group(1):
            lit = lit.rstrip(" \t\r\n")
        out.append(("text", lit))
        out.append(("action", m.group(2)))
        pos = m.end()
        if m.group(3):
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
    out.append(("text", text[pos:]))
    return out


def parse(toks, i=0, closing=False):
    """A list of nodes up to the matching `end` (when `closing`)."""
    nodes = []
    while i < len(toks):
        kind, val = toks[i]
        i += 1
        if kind == "text":
            nodes.append(("text", val))
        elif val == "end":
            if not closing:
                fail("`end` without `if` or `range`")
            return nodes, i
        elif val.startswith("if ") or val.startswith("range "):
            word, expr = val.split(None, 1)
            body, i = parse(toks, i, True)
            nodes.append((word, expr, body))
        else:
            nodes.append(("expr", val))
    if closing:
        fail("missing `end`")
    return nodes, i


def lookup(path, ctx):
    if path == ".":
        return ctx["dot"]
    if path in (".Release.Name", ".Release.Namespace"):
        return ctx["release"][path.rsplit(".", 1)[1]]
    if not path.startswith(".Values."):
        fail(f"unsupported value {path!r}")
    v = ctx["values"]
    for part in path[len(".Values.") :].split("."):
        if not isinstance(v, dict) or part not in v:
            fail(f"{path}: no such value")
        v = v[part]
    return v


def go_str(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        fail(f"{v!r} needs toYaml")
    return str(v)


def indent(s, n):
    pad = " " * n
    return pad + s.replace("\n", "\n" + pad)


def evaluate(expr, ctx):
    stages = [s.strip() for s in expr.split("|")]
    first = stages[0].split()
    if len(first) == 2 and first[0] == "toYaml":
        v = lookup(first[1], ctx)
        val = yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")
    elif len(first) == 1:
        val = go_str(lookup(first[0], ctx))
    else:
        fail(f"unsupported pipeline {expr!r}")
    for stage in stages[1:]:
        words = stage.split()
        if words == ["quote"]:
            val = '"' + val.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif len(words) == 2 and words[0] in ("nindent", "indent") and words[1].isdigit():
            val = ("\n" if words[0] == "nindent" else "") + indent(val, int(words[1]))
        else:
            fail(f"unsupported function {stage!r}")
    return val


def render(nodes, ctx):
    out = []
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            out.append(evaluate(node[1], ctx))
        elif node[0] == "if":
            if lookup(node[1], ctx):
                out.append(render(node[2], ctx))
        else:
            items = lookup(node[1], ctx)
            if not isinstance(items, list):
                fail(f"range over {node[1]}: not a list")
            for item in items:
                out.append(render(node[2], dict(ctx, dot=item)))
    return "".join(out)


def set_value(values, key, raw):
    parts = key.split(".")
    for p in parts[:-1]:
        values = values.setdefault(p, {})
    values[parts[-1]] = yaml.safe_load(raw)


def main():
    chart, release, namespace, out_dir, *sets = sys.argv[1:]
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for s in sets:
        key, _, raw = s.partition("=")
        set_value(values, key, raw)
    ctx = {"values": values, "release": {"Name": release, "Namespace": namespace}, "dot": None}
    tdir = os.path.join(chart, "templates")
    os.makedirs(out_dir, exist_ok=True)
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(tdir, name)) as f:
            nodes, _ = parse(tokens(f.read()))
        text = render(nodes, ctx)
        if text.strip():
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")


if __name__ == "__main__":
    main()

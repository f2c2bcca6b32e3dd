"""Attention views: what both heads look at on sequences you type, interactive and offline.

``compose-lens attention MODEL "b=7, e=5, b+23=?" ...`` parses each readable
sequence (:func:`compose_lens.task.parse_sequence`), runs the model once with
``run_with_cache`` and reads ``blocks.{0,1}.attn.hook_pattern``. It writes

* ``attention.html``: one circuitsvis ``AttentionHeads`` view per sequence (both
  layers, every head), and
* ``attention_<i>.png``: the same patterns as heatmaps with the cells the circuit
  predicts outlined (:func:`marked_cells`), plus ``attention.json`` with the
  patterns, the model's answers and the labels.

**Offline.** circuitsvis's own HTML imports its JavaScript from a CDN (unpkg), so
it shows nothing without a network. The installed package ships the same
bundle, ``circuitsvis/dist/cdn/iife.js``, which defines a global
``CircuitsVis``. :func:`offline_page` inlines that bundle *once* in a classic
``<script>`` and each view is a ``<div>`` plus a one-line
``CircuitsVis.render(id, CircuitsVis.AttentionHeads, props)`` call, so a page
with many views stays one self-contained file that opens from disk.

What to look for (SPEC section 6, items 1-3): in layer 1 each context value
attends to the variable just before it (previous-token head) and ``=`` attends to
the two operands; in layer 2 ``=`` attends to the two *values*, the operand
itself for a constant and the assigned number for a variable.
"""

from __future__ import annotations

import argparse
import html
import json
import uuid
from pathlib import Path
from typing import Sequence

import torch

from compose_lens import lens
from compose_lens.config import ComposeLensError, RunConfig, TaskConfig
from compose_lens.task import decode, parse_sequence, to_text, token_name

HOOK = "blocks.{layer}.attn.hook_pattern"


# -- the patterns --------------------------------------------------------------------------------


def attention_patterns(model: lens.Model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Patterns (B, n_layers, n_heads, n, n) and last-position logits (B, d_vocab_out)."""
    n_layers = int(model.cfg.n_layers)
    names = {HOOK.format(layer=i) for i in range(n_layers)}
    device = lens.parameters(model)["embed.weight"].device
    with torch.no_grad():
        logits, cache = lens.run_with_cache(model, tokens.to(device), names_filter=lambda n: n in names)
    patterns = torch.stack([cache[HOOK.format(layer=i)] for i in range(n_layers)], dim=1)
    return patterns.float().cpu(), logits[:, -1].float().cpu()


def marked_cells(task: TaskConfig, tokens: Sequence[int]) -> dict[int, list[tuple[int, int, str]]]:
    """The cells the study's circuit predicts, per layer: ``(query, key, kind)``.

    Layer 1 (index 0): ``=`` to each operand position (``operand``) and each
    context value to its variable just before it (``previous``). Layer 2 (index 1):
    ``=`` to each value position (``value``): the operand itself for a constant,
    the number after the variable's assignment for a variable.
    """
    tokens = [int(t) for t in tokens]
    n, C = task.seq_len, task.context_len
    last = n - 1
    layer1 = [(last, n - 3, "operand"), (last, n - 2, "operand")]
    layer1 += [(i, i - 1, "previous") for i in range(1, C)
               if 0 <= tokens[i] < task.modulus and tokens[i - 1] >= task.first_var_token]
    layer2 = []
    for position in (n - 3, n - 2):
        operand = tokens[position]
        if operand >= task.first_var_token:
            layer2.append((last, tokens[:C].index(operand) + 1, "value"))
        else:
            layer2.append((last, position, "value"))
    return {0: layer1, 1: layer2}


# -- offline circuitsvis -----------------------------------------------------------------------------


def circuitsvis_bundle() -> str:
    """The circuitsvis browser bundle from the installed package, safe to inline."""
    import circuitsvis

    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.exists():
        raise ComposeLensError(f"{path}: the circuitsvis package has no browser bundle; "
                               f"reinstall circuitsvis==1.43.3")
    source = path.read_text(encoding="utf-8")
    lines = [line for line in source.splitlines() if not line.startswith("//# sourceMappingURL")]
    return "\n".join(lines).replace("</script", "<\\/script")


def attention_view(patterns: torch.Tensor, tokens: Sequence[str], head_names: Sequence[str],
                   element_id: str | None = None) -> str:
    """One interactive ``AttentionHeads`` view: a div and the call that draws into it.

    ``patterns`` (heads, n, n); needs the bundle of :func:`offline_page` on the page.
    """
    element_id = element_id or f"circuits-vis-{uuid.uuid4().hex[:12]}"
    props = {"attention": [[[round(float(v), 5) for v in row] for row in head] for head in patterns.tolist()],
             "tokens": list(tokens), "attentionHeadNames": list(head_names), "maskUpperTri": True}
    payload = json.dumps(props).replace("</", "<\\/")
    return (f'<div id="{element_id}" class="attention-view" style="margin: 15px 0;"></div>\n'
            f'<script>CircuitsVis.render("{element_id}", CircuitsVis.AttentionHeads, {payload});</script>')


def offline_page(title: str, body: str, style: str = "") -> str:
    """A complete HTML page with the circuitsvis bundle inlined once in the head."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{style}</style>\n"
            f"<script>\n{circuitsvis_bundle()}\n</script>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


PAGE_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;color:#222}"
              "code{background:#f3f3f3;padding:0 .3em}h2{margin-top:2em}")


# -- one call for a list of sequences --------------------------------------------------------------


def head_names(model: lens.Model) -> list[str]:
    n_layers, n_heads = int(model.cfg.n_layers), int(model.cfg.n_heads)
    return [f"layer {layer + 1} (blocks.{layer}) head {head}" if n_heads > 1 else f"layer {layer + 1} (blocks.{layer})"
            for layer in range(n_layers) for head in range(n_heads)]


def sequence_views(model: lens.Model, config: RunConfig, texts: Sequence[str]) -> list[dict]:
    """Parse, run and describe each sequence: tokens, words, patterns, answer, label, marks."""
    task = config.task
    token_rows = [parse_sequence(task, text) for text in texts]
    tokens = torch.tensor(token_rows, dtype=torch.long)
    patterns, logits = attention_patterns(model, tokens)
    names = head_names(model)
    views = []
    for i, row in enumerate(token_rows):
        d = decode(task, row)
        answer = int(logits[i].argmax())
        views.append({"text": to_text(task, row), "tokens": row, "words": [token_name(task, t) for t in row],
                      "patterns": patterns[i], "head_names": names, "answer": answer, "label": d.label,
                      "correct": answer == d.label, "type": d.type, "marks": marked_cells(task, row)})
    return views


def view_html(view: dict) -> str:
    """A heading and the interactive view for one entry of :func:`sequence_views`."""
    p = view["patterns"]
    flat = p.reshape(-1, p.shape[-2], p.shape[-1])
    verdict = "correct" if view["correct"] else "wrong"
    return (f"<h3><code>{html.escape(view['text'])}</code></h3>\n"
            f"<p>model answers <b>{view['answer']}</b>, the label is {view['label']} ({verdict}); "
            f"type {view['type']}. Tokens: <code>{html.escape(' '.join(view['words']))}</code></p>\n"
            + attention_view(flat, [f"{w}" for w in view["words"]], view["head_names"]))


def view_figure(view: dict):
    """The PNG heatmap of one view (head 0 of each layer) with the predicted cells outlined."""
    from compose_lens.figures import attention_figure

    verdict = "correct" if view["correct"] else "wrong"
    return attention_figure(view["patterns"][:, 0].numpy(), view["words"], view["marks"],
                            title=f"{view['text']}  ->  {view['answer']} ({verdict}, label {view['label']})")


def write_attention(model: lens.Model, config: RunConfig, texts: Sequence[str], out: str | Path,
                    source: str = "") -> tuple[list[Path], list[dict]]:
    """Write attention.html (offline), attention_<i>.png/.csv and attention.json into ``out``.

    Returns the files written (the page first) and the views (:func:`sequence_views`).
    """
    from compose_lens.figures import save

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    views = sequence_views(model, config, texts)
    written = []
    body = [f"<h1>Attention views</h1><p>model: <code>{html.escape(source)}</code></p>",
            "<p>Click a head to enlarge it; hover a token to see where it attends.</p>"]
    for i, view in enumerate(views):
        body.append(view_html(view))
        fig, data = view_figure(view)
        written += save(fig, data, out / f"attention_{i}.png")
    page = out / "attention.html"
    page.write_text(offline_page("compose-lens attention", "\n".join(body), PAGE_STYLE), encoding="utf-8")
    summary = [{k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in view.items()} for view in views]
    (out / "attention.json").write_text(json.dumps({"model": source, "sequences": summary}))
    return [page, out / "attention.json", *written], views


def _cmd_attention(args: argparse.Namespace) -> int:
    from compose_lens.model import load_model

    loaded = load_model(args.model, args.split, device=args.device)
    written, views = write_attention(loaded.model, loaded.config, args.sequences, args.out, loaded.source)
    for view in views:
        mark = "ok " if view["correct"] else "WRONG"
        print(f"{mark} {view['text']:40s} -> {view['answer']} (label {view['label']})")
    print(f"wrote {written[0]} (opens offline) and {len(written) - 2} PNG/CSV files in {args.out}")
    return 0


def register(sub) -> None:
    from compose_lens.cli import add_model_arguments

    p = sub.add_parser("attention", help="attention views of readable sequences (offline HTML + PNG)")
    add_model_arguments(p)
    p.add_argument("sequences", nargs="+", help="readable sequences, e.g. 'b=7, e=5, b+23=?'")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_attention)

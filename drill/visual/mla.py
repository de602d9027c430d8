"""KV-cache bytes per token for MHA, GQA, MQA and MLA, for a real model's shapes.

DeepSeek-V2 §2.1 (Table 1) counts the elements each attention variant caches per token
and layer: MHA 2·n_h·d_h (a key and a value per head), GQA 2·n_g·d_h (one per group), MQA
2·d_h (one for all heads), MLA d_c + d_h^R (one latent vector and one shared RoPE key).
The figures below use DeepSeek-V3's published config (config.json of deepseek-ai/DeepSeek-V3:
61 layers, 128 heads, qk_nope_head_dim = v_head_dim = 128, kv_lora_rank = 512,
qk_rope_head_dim = 64) with d_h = 128 as the paper does. Standard library and rich only:
`drill show` must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill.console import console
from drill.errors import cannot


@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    heads: int  # n_h, query heads
    head_dim: int  # d_h, per-head key and value width of the MHA equivalent
    latent: int  # d_c, MLA's cached latent width
    rope: int  # d_h^R, MLA's shared RoPE key width


DEEPSEEK_V3 = Model("DeepSeek-V3", layers=61, heads=128, head_dim=128, latent=512, rope=64)


def elements_per_token_layer(model: Model, groups: int) -> dict[str, int]:
    """Cached elements per token and layer of each variant (GQA with `groups` K/V heads)."""
    return {
        "MHA": 2 * model.heads * model.head_dim,
        "GQA": 2 * groups * model.head_dim,
        "MQA": 2 * model.head_dim,
        "MLA": model.latent + model.rope,
    }


def kv_cache_bytes_per_token(model: Model = DEEPSEEK_V3, groups: int = 8, dtype_bytes: int = 2) -> dict[str, int]:
    """KV-cache bytes per token over all layers of each variant, for elements of dtype_bytes bytes."""
    return {k: v * model.layers * dtype_bytes for k, v in elements_per_token_layer(model, groups).items()}


def mla_equivalent_groups(model: Model = DEEPSEEK_V3) -> float:
    """The GQA group count whose cache equals MLA's: (d_c + d_h^R) / (2·d_h)."""
    return (model.latent + model.rope) / (2 * model.head_dim)


def _size(n: int) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:,.1f} {unit}"
    return f"{n} B"


def kv_cache_summary(model: Model, groups: int, dtype_bytes: int, context: int) -> Group:
    per_layer = elements_per_token_layer(model, groups)
    per_token = kv_cache_bytes_per_token(model, groups, dtype_bytes)
    head = Text()
    head.append("KV cache per token", style="accent")
    head.append(f"  {model.name}: {model.layers} layers, n_h = {model.heads} heads, d_h = {model.head_dim}, "
                f"d_c = {model.latent}, d_h^R = {model.rope}; {dtype_bytes}-byte elements\n")
    head.append("MLA caches one latent vector c_KV and one RoPE key shared by every head; the per-head keys "
                "and values are rebuilt from c_KV by W_UK and W_UV (absorbed into the query and the output "
                "at decode), so they are never stored.")
    table = Table(show_edge=False, pad_edge=False)
    for name, justify in (("variant", "left"), ("cached per token and layer", "left"), ("elements", "right"),
                          ("bytes per token", "right"), (f"{context:,} tokens", "right"), ("vs MLA", "right")):
        table.add_column(name, justify=justify)
    formulas = {"MHA": f"2·n_h·d_h = 2·{model.heads}·{model.head_dim}",
                "GQA": f"2·n_g·d_h = 2·{groups}·{model.head_dim}",
                "MQA": f"2·d_h = 2·{model.head_dim}",
                "MLA": f"d_c + d_h^R = {model.latent} + {model.rope}"}
    for name in ("MHA", "GQA", "MQA", "MLA"):
        table.add_row(name, formulas[name], f"{per_layer[name]:,}", f"{per_token[name]:,}",
                      _size(per_token[name] * context), f"{per_token[name] / per_token['MLA']:.2f}×")
    notes = Text(style="grey50")
    notes.append(f"MLA's cache equals GQA with (d_c + d_h^R) / (2·d_h) = {mla_equivalent_groups(model):g} groups "
                 "(DeepSeek-V2 §2.1); MQA caches less, but one K/V head for all 128 query heads costs quality "
                 "that MLA keeps. Bytes per token = elements per layer × layers × bytes per element.")
    return Group(head, Text(""), table, Text(""), notes)


@click.command(name="kv-cache")
@click.option("--groups", type=int, default=8, show_default=True, help="K/V heads of the GQA row.")
@click.option("--bytes", "dtype_bytes", type=int, default=2, show_default=True,
              help="Bytes per cached element (2 for bf16, 1 for fp8).")
@click.option("--context", type=int, default=128 * 1024, show_default=True, help="Tokens for the total column.")
def show_kv_cache(groups: int, dtype_bytes: int, context: int) -> None:
    """KV-cache bytes per token of MHA, GQA, MQA and MLA, for DeepSeek-V3's shapes."""
    if not 1 <= groups <= DEEPSEEK_V3.heads or DEEPSEEK_V3.heads % groups:
        cannot(f"--groups must divide the {DEEPSEEK_V3.heads} heads (got {groups})")
    if dtype_bytes not in (1, 2, 4):
        cannot(f"--bytes must be 1, 2 or 4 (got {dtype_bytes})")
    if context < 1:
        cannot(f"--context must be at least 1 (got {context})")
    console.print(kv_cache_summary(DEEPSEEK_V3, groups, dtype_bytes, context))

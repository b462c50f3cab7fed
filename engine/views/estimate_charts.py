"""The Memory estimator's pictures, as plain HTML for gr.HTML (no plotting library, nothing for the browser to load):

- memory per card: one horizontal bar per card, drawn against that card's usable memory (a full track = all of it),
  coloured by the verdict (fits / tight / does not fit), with the estimate's likely range striped over it and the
  numbers and the verdict in words beside it (colour is never the only signal);
- the breakdown: one stacked bar of the memory terms with a legend that names every segment, largest first, with
  its GiB and share.

Every text in them comes from the caller in the visitor's language; names are escaped. Inline styles only, using
gradio's theme variables so that the pictures follow the light and dark themes.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..i18n import fmt_number, norm_lang, t

VERDICT_COLOURS = {"fits": "#16a34a", "tight": "#d97706", "no": "#dc2626"}
# One colour per memory term (engine/estimator/memory.py TERMS order), distinct enough side by side.
TERM_COLOURS = ("#2563eb", "#7c3aed", "#db2777", "#ea580c", "#ca8a04", "#16a34a", "#0891b2", "#4f46e5", "#9333ea", "#64748b", "#a16207")
_TEXT = "color: var(--body-text-color, inherit)"
_MUTED = "color: var(--body-text-color-subdued, #6b7280)"
_TRACK = "background: var(--background-fill-secondary, #f3f4f6); border: 1px solid var(--border-color-primary, #d1d5db)"


@dataclass(frozen=True)
class CardBar:
    """One card's bar: what the job needs on it against what it can give, in GiB."""

    name: str  # the card's name in the visitor's language
    detail: str  # a tooltip: the tier's full description
    need_gib: float  # predicted, as nvidia-smi would show it on this card
    low_gib: float  # the estimate's likely range
    high_gib: float
    usable_gib: float
    verdict: str  # fits | tight | no
    verdict_text: str  # the verdict in words
    chosen: bool = False  # the card picked as "your card"


def _num(value: float, lang: str, digits: int = 1) -> str:
    """13.0 / 13,0 (fixed decimals, the language's separators: the figures of a column line up)."""
    text = f"{value:,.{digits}f}"
    return text.translate(str.maketrans(",.", ".,")) if norm_lang(lang) == "pt-BR" else text


def _swatch(colour: str, striped: bool = False) -> str:
    fill = f"repeating-linear-gradient(45deg, {colour}55 0 3px, transparent 3px 6px)" if striped else colour
    return f'<span style="display:inline-block;width:0.9em;height:0.9em;border-radius:2px;background:{fill};vertical-align:-0.1em;margin-right:0.3em"></span>'


def card_bars_html(bars: list[CardBar], lang: str) -> str:
    """Memory per card: one row per card (name, bar, "need / usable GiB · verdict"), with a one-line key above."""
    key = " · ".join([f"{_swatch(VERDICT_COLOURS[v])}{html.escape(t(f'estimator.verdict.{v}', lang))}" for v in ("fits", "tight", "no")]
                     + [f"{_swatch('#6b7280', striped=True)}{html.escape(t('estimator.bars.range', lang))}"])
    rows = []
    for b in bars:
        colour = VERDICT_COLOURS.get(b.verdict, "#6b7280")
        usable = max(b.usable_gib, 1e-9)
        width = min(b.need_gib / usable, 1.0) * 100
        lo, hi = (min(v / usable, 1.0) * 100 for v in (b.low_gib, b.high_gib))
        label = t("estimator.bars.row_label", lang, card=b.name, need=_num(b.need_gib, lang), usable=_num(b.usable_gib, lang), verdict=b.verdict_text)
        name = html.escape(b.name) + (f' <span style="{_MUTED}">· {html.escape(t("estimator.bars.yours", lang))}</span>' if b.chosen else "")
        # A wrapping row: name | bar | numbers on a wide panel; on a phone the name takes its own line, the bar the next.
        rows.append(
            f'<div style="display:flex;flex-wrap:wrap;align-items:center;gap:2px 8px">'
            f'<div title="{html.escape(b.detail)}" style="flex:0 1 15rem;{_TEXT};{"font-weight:600;" if b.chosen else ""}overflow-wrap:anywhere">{name}</div>'
            f'<div style="flex:1 1 9rem;display:flex;align-items:center;gap:8px">'
            f'<div role="img" aria-label="{html.escape(label)}" title="{html.escape(label)}" '
            f'style="flex:1 1 auto;position:relative;height:1.1rem;border-radius:4px;overflow:hidden;{_TRACK}">'
            f'<div style="width:{width:.1f}%;height:100%;background:{colour}"></div>'
            f'<div style="position:absolute;top:0;bottom:0;left:{lo:.1f}%;width:{max(hi - lo, 0.5):.1f}%;'
            f'background:repeating-linear-gradient(45deg, rgba(0,0,0,.28) 0 3px, transparent 3px 6px)"></div></div>'
            f'<div style="flex:0 0 auto;{_TEXT};white-space:nowrap;text-align:right;min-width:9.5rem">{_num(b.need_gib, lang)} / {_num(b.usable_gib, lang)} GiB · '
            f'<b style="color:{colour}">{html.escape(b.verdict_text)}</b></div></div></div>'
        )
    return (f'<div class="lab-card-bars" style="font-size:0.9rem">'
            f'<div style="{_TEXT};font-weight:600;margin-bottom:2px">{html.escape(t("estimator.bars.title", lang))}</div>'
            f'<div style="{_MUTED};font-size:0.85em;margin-bottom:6px">{html.escape(t("estimator.bars.explain", lang))}<br>{key}</div>'
            f'<div style="display:flex;flex-direction:column;gap:5px">' + "".join(rows) + "</div></div>")


def breakdown_html(segments: list[tuple[str, float, int]], total_gib: float, lang: str) -> str:
    """The breakdown as one stacked bar and a legend naming every segment (largest first) with its GiB and share.
    segments: (term name in the visitor's language, GiB, colour index); zero terms are left out by the caller."""
    total = sum(g for _, g, _ in segments) or 1.0
    bar = "".join(f'<div title="{html.escape(name)}: {_num(g, lang)} GiB" style="width:{100 * g / total:.2f}%;height:100%;'
                  f'background:{TERM_COLOURS[c % len(TERM_COLOURS)]}"></div>' for name, g, c in segments)
    legend = "".join(
        f'<div style="{_TEXT};white-space:nowrap">{_swatch(TERM_COLOURS[c % len(TERM_COLOURS)])}{html.escape(name)} '
        f'<b>{_num(g, lang, 2)} GiB</b> <span style="{_MUTED}">({html.escape(fmt_number(round(100 * g / total), lang))}%)</span></div>'
        for name, g, c in sorted(segments, key=lambda s: -s[1]))
    title = t("estimator.chart.title", lang, total=_num(total_gib, lang, 2))
    return (f'<div class="lab-breakdown" style="font-size:0.9rem">'
            f'<div style="{_TEXT};font-weight:600;margin-bottom:4px">{html.escape(title)}</div>'
            f'<div role="img" aria-label="{html.escape(title)}" style="display:flex;height:1.6rem;border-radius:4px;overflow:hidden;{_TRACK}">{bar}</div>'
            f'<div style="display:flex;flex-wrap:wrap;gap:2px 14px;margin-top:6px">{legend}</div></div>')

"""The page's own style sheet (ui/page.py launch_options)."""

from __future__ import annotations

# The page's own style (launch_options): the guided strip, phone widths, readable tables. Selectors use the page's
# elem_ids/elem_classes and gradio 6's documented class names (.row, .column, .table-wrap).
CSS = """
#page-title h1 { margin: 0; }
/* the language switch sits at the title's right, not on a line of its own */
@media (min-width: 641px) { #lang-switch { position: absolute; top: 12px; right: 16px; width: auto; z-index: 10; } }
#page-intro, #page-notice { padding-top: 0; padding-bottom: 0; }

/* the guided strip: three steps, an arrow between them; each step opens its panel, the open panel's step is marked.
   (gradio prefixes the rules inside @media with .gradio-container... .contain: hence div:has(), not .gradio-container:has()) */
#guide { gap: 22px; margin: 2px 0 4px; }
#guide .guide-step { position: relative; justify-content: flex-start; gap: 6px; padding: 10px 12px; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-lg); background: var(--block-background-fill); }
#guide .guide-step:not(:last-child)::after { content: "→"; position: absolute; right: -19px; top: 50%; transform: translateY(-50%);
  font-size: 20px; font-weight: 700; line-height: 1; color: var(--body-text-color-subdued); pointer-events: none; }
#guide .guide-step { flex-direction: row !important; align-items: center; }  /* a step's sentence beside its button: the form stays in the first screen */
#guide .guide-step button { flex: 0 0 auto; font-weight: 600; font-size: var(--text-md); }
#guide .guide-hint { padding: 0; border: 0; background: none; box-shadow: none; }
#guide .guide-hint p { margin: 0; font-size: var(--text-sm); line-height: 1.4; color: var(--body-text-color); opacity: 0.8; }
div:has(#est-panel-button[aria-selected="true"]) #guide-estimate,
div:has(#ft-panel-button[aria-selected="true"]) #guide-finetune,
div:has(#pg-panel-button[aria-selected="true"]) #guide-try {
  background: var(--button-primary-background-fill); color: var(--button-primary-text-color); border-color: var(--button-primary-border-color); }

/* tables: no column wider than about 20 characters (gradio sizes a column by its longest cell, up to the whole table:
   one long cell hid every other column); what is wider scrolls sideways inside the table; header words never break */
.table-wrap { --df-max-col-width: 20em !important; }
.table-wrap th .header, .table-wrap th span { word-break: normal !important; overflow-wrap: normal !important; hyphens: none; }

/* tables wider than their card scroll sideways inside it, with a scrollbar that stays in view (a phone's overlay
   scrollbar shows only while one scrolls, so nothing said the table went on): the history and other gr.Dataframes
   (.virtual-table-viewport), the date answers and GRPO's samples (.scroll-x, engine/views/run_charts.py). gradio sets
   scrollbar-width: thin on its tables, which would make Chromium ignore the ::-webkit-scrollbar style below */
.table-wrap .virtual-table-viewport, .scroll-x { max-width: 100%; overflow-x: auto; scrollbar-width: auto; scrollbar-color: auto; }
.table-wrap .virtual-table-viewport::-webkit-scrollbar, .scroll-x::-webkit-scrollbar { height: 10px; width: 10px; }
.table-wrap .virtual-table-viewport::-webkit-scrollbar-thumb, .scroll-x::-webkit-scrollbar-thumb { background: var(--neutral-400, #9ca3af);
  border-radius: 5px; border: 2px solid var(--neutral-100, #f3f4f6); }
.table-wrap .virtual-table-viewport::-webkit-scrollbar-track, .scroll-x::-webkit-scrollbar-track { background: var(--neutral-100, #f3f4f6); border-radius: 5px; }
.scroll-x table td:first-child { min-width: 13em; }  /* a question reads as a line, not a word per line */

/* a slider's label and help take the line and its number box goes under them when the column is narrow (the Epochs
   field beside Max steps was squeezed to one word per line) */
.block .head:has(> .tab-like-container) { flex-wrap: wrap; row-gap: 4px; }
.block .head:has(> .tab-like-container) > label { flex: 1 1 14em; min-width: 0; }
/* an uploaded file's whole name, on more lines if need be (a narrow box showed "my_training_data.csv" as ".c") */
.file-preview tr.file { display: flex; flex-wrap: wrap; align-items: baseline; }
.file-preview td.filename { display: flex; flex-wrap: wrap; flex: 1 1 8em; min-width: 0; white-space: normal; overflow-wrap: anywhere; }
.file-preview td.download { flex: 0 0 auto; }
.file-preview td.filename .stem, .file-preview td.filename .ext { min-width: 0; overflow-wrap: anywhere; white-space: normal; overflow: visible; text-overflow: clip; max-width: none; }

/* phone widths: the panels' tabs wrap onto a second line (build_app), results come before the long forms */
@media (max-width: 640px) {
  .form-results > .column:last-child { order: -1; }
  /* the fine-tune panel's results come first, so its Start/Stop stay on screen in a bar at the bottom */
  #ft-panel .row:has(> #finetune-start) { position: fixed; left: 0; right: 0; bottom: 0; z-index: 1000; margin: 0; padding: 8px 12px;
    flex-wrap: nowrap; align-items: stretch; background: var(--background-fill-primary); border-top: 1px solid var(--border-color-primary);
    box-shadow: 0 -2px 8px rgba(0, 0, 0, 0.08); }
  #ft-panel .row:has(> #finetune-start) > button { min-width: 0 !important; }
  #ft-panel { padding-bottom: 72px; }
  .table-wrap { --df-max-col-width: 46vw !important; }
  /* Compare's two model fields one above the other (gradio groups them in a .form): side by side, A showed "builtin:compac" */
  .row:has(> #playground-model-a), .form:has(> #playground-model-a) { flex-direction: column; }
  #page-title h1 { font-size: 1.5rem; }
  #page-intro p, #page-notice p { font-size: var(--text-sm); margin: 0; }
  /* the strip: the three steps in one line, and the sentence of the open panel's step under them */
  #guide { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 6px; }
  #guide .guide-step { display: contents; }
  #guide .guide-step:not(:last-child)::after { display: none; }
  #guide .guide-step button { grid-row: 1; min-width: 0; padding: 6px 4px; font-size: var(--text-sm); }
  #guide .block.guide-hint { grid-row: 2; grid-column: 1 / -1; display: none; }
  div:has(#est-panel-button[aria-selected="true"]) #guide-estimate-hint,
  div:has(#ft-panel-button[aria-selected="true"]) #guide-finetune-hint,
  div:has(#pg-panel-button[aria-selected="true"]) #guide-try-hint { display: block; }
}
"""

"""Presentation logic for the web page, without gradio: the text, HTML, tables and choice lists that the page (ui/) shows,
and the small pieces of state (uploads kept, stop signals) behind its handlers. The top layer: it may import any
part of the engine; nothing in the engine imports it, and it never imports gradio (ui/ maps its results onto
components)."""

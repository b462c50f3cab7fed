"""The login of the page (gradio's launch(auth=...)): --auth, COMPACT_LAB_AUTH, or a generated password on a Colab link."""

from __future__ import annotations

import argparse
import os
import secrets

from engine import sharing

AUTH_ENV = "COMPACT_LAB_AUTH"  # the login as USER:PASSWORD from the environment (a Space secret)


def login_of(args: argparse.Namespace, decision: sharing.Decision) -> tuple[tuple[str, str] | None, str | None]:
    """gradio's launch(auth=...) and a line to print: --auth USER:PASSWORD or COMPACT_LAB_AUTH (a Space secret); on
    Colab with a public link, a login with a password generated now unless --no-auth."""
    spec = args.auth or os.environ.get(AUTH_ENV, "")
    if args.no_auth:
        if decision.shared:
            return None, "WARNING: --no-auth on a shared app: anyone with the link can use it (train, load models, fill the disk)."
        return None, None
    if spec:
        user, sep, password = spec.partition(":")
        if not sep or not user or not password:
            raise SystemExit(f"--auth / {AUTH_ENV} must be USER:PASSWORD (both non-empty).")
        return (user, password), f"Login required: user {user!r} (the password you gave)."
    if sharing.on_colab() and decision.shared:
        password = secrets.token_urlsafe(9)
        return ("lab", password), f"Login is on for this public link: user 'lab', password {password} (new at every start; --no-auth turns it off)."
    return None, None

"""The login of the page (gradio's launch(auth=...)): --auth, COMPACT_LAB_AUTH, or a generated password on every public
link the app opens itself (engine/sharing.py `default_login`: --share, Colab, Kaggle, SageMaker, GRADIO_SHARE)."""

from __future__ import annotations

import argparse
import os

from engine import sharing

AUTH_ENV = sharing.AUTH_ENV  # the login as USER:PASSWORD from the environment (a Space secret)


def login_of(args: argparse.Namespace, decision: sharing.Decision) -> tuple[tuple[str, str] | None, str | None]:
    """gradio's launch(auth=...) and a line to print: --auth USER:PASSWORD or COMPACT_LAB_AUTH (a Space secret); on a
    public link the app opens itself (`sharing.default_login`), a login with a password generated now unless --no-auth."""
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
    if sharing.default_login(decision):
        password = sharing.generated_password()
        return ("lab", password), f"Login is on for this public link: user 'lab', password {password} (new at every start; --no-auth turns it off)."
    return None, None

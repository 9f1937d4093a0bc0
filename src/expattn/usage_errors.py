"""The CLI's command group: a parse error (an option of the wrong type, an unknown option or command) is one
``error:`` line with exit status 2 like every other user error, not click's usage box, and Ctrl-C one line with
status 130; asking for help without arguments still shows the help.
"""

from __future__ import annotations

import sys

import typer
from typer.core import TyperGroup

try:  # recent typer vendors click: its parse errors are these classes, not the click package's
    from typer._click import Context
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - typer before the vendoring
    from click import Context
    from click.exceptions import NoArgsIsHelpError, UsageError

from expattn.terminal import error


class OneLineUsageErrors(TyperGroup):
    """The command group whose parse errors are one ``error:`` line like every other user error, not click's
    usage box; asking for help without arguments (``NoArgsIsHelpError``) still shows the help."""

    def make_context(self, info_name, args, parent=None, **extra) -> Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except NoArgsIsHelpError:
            raise
        except UsageError as err:  # a value of the wrong type, an unknown option or command: exit 2
            error(_without_guess(err))

    def invoke(self, ctx: Context) -> object:  # the sub-command's options are parsed here
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except KeyboardInterrupt:  # Ctrl-C: one line; staging folders and temporary files are gone already, finished
            # seeds and stages of a run that --resume goes on with are kept
            print("interrupted; no partial output left (what was finished is kept)", file=sys.stderr)
            raise typer.Exit(code=130) from None
        except UsageError as err:  # a value of the wrong type, an unknown option or command: exit 2
            error(_without_guess(err))


def _without_guess(err: UsageError) -> str:
    """The parse error's message; for an unknown option, without click's guess at what was meant (it offers any
    option that shares letters: ``--atoms`` for ``--jobs``), pointing to the command's help instead."""
    message = err.format_message()
    if (message.startswith("No such option") and "(Possible options" in message) or "Did you mean" in message:
        message = message.split(" (Possible options")[0].split(" Did you mean")[0].rstrip(".")
        command = " ".join(["expattn", *(err.ctx.command_path.split()[1:] if err.ctx is not None else [])])
        message += f"; `{command} --help` lists the options"
    return message

"""A griffe extension for the documentation site's API reference (``mkdocs.yml`` loads it): the
package's docstrings are written for ``help()`` and doctest, with Sphinx roles and
``Example:`` sections; this rewrites them, before they are parsed, into what mkdocstrings
renders:

- ``:class:`Name``` (and ``:func:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``; ``~``
  keeps the last dotted part) becomes code linked to the name's entry where the site has one;
- ``Example:`` becomes ``Examples:``, the Google-style section griffe reads as doctest code.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):`(~?)([\w.]+)(\(\))?`")
EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)


def _candidates(obj: griffe.Object, target: str) -> list[str]:
    """The full paths ``target`` may mean inside ``obj``: itself, then relative to ``obj`` and
    each object around it, innermost first."""
    out, scope = [target], obj
    while scope is not None:
        out.append(f"{scope.path}.{target}")
        scope = scope.parent
    return out


def _resolve(obj: griffe.Object, target: str, loader: griffe.GriffeLoader) -> str | None:
    for path in _candidates(obj, target):
        try:
            loader.modules_collection.get_member(path)
        except (
            KeyError,
            ValueError,
            AttributeError,
            griffe.AliasResolutionError,
            griffe.CyclicAliasError,
        ):
            continue
        return path
    return None


class SphinxRoles(griffe.Extension):
    """Sphinx roles to links or code, ``Example:`` sections to ``Examples:``."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs) -> None:
        if obj.is_alias or obj.docstring is None:
            return

        def link(match: re.Match) -> str:
            short, target, call = match.group(1), match.group(2), match.group(3) or ""
            shown = (target.rsplit(".", 1)[-1] if short else target) + call
            path = _resolve(obj, target, loader)
            if path is None:
                return f"`{shown}`"
            return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'

        text = ROLE.sub(link, obj.docstring.value)
        obj.docstring.value = EXAMPLE.sub(r"\1Examples:", text)

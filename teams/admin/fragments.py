"""The HTML of the admin's read-only fields, rendered from templates/admin/teams/fragments/.

A fragment's template is written one element per line for reading; its line breaks and
the indentation after them are not part of the output, so the field shows inline as
one piece of markup (autoescaped like any template)."""

import re

from django.template import engines
from django.template.loader import get_template
from django.utils.safestring import SafeString


def _template(name: str):
    source = get_template(f"admin/teams/fragments/{name}").template.source
    return engines["django"].from_string(re.sub(r"\n[ \t]*", "", source))


def fragment(name: str, **context) -> SafeString:
    return _template(name).render(context)

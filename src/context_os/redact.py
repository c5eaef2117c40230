"""Redaction: remove secrets from text before it is persisted.

``Redactor().redact(text) -> (text, n)`` replaces every secret it finds with
``[REDACTED:<type>]``. Only the secret value is replaced, so the text keeps its shape: an
assignment keeps its key, a URL its host, a JSON string stays a JSON string. Sessions run it over
every message, tool output and tool argument by default (``Session.open(..., redact=False)``
opts out); a ``Workspace`` runs its own over file text and file-tool output.

**Detection is detect-secrets' (Yelp).** Its detector plugins (GitHub, AWS, JWT, private keys,
Slack, Stripe, OpenAI, secret-keyword assignments, …) find the secrets; ``default_plugins()`` is
the set that runs by default, chosen by measurement on real sessions (bench/redaction.py, numbers
in docs/files.md). A few shapes detect-secrets 1.5 does not know are added as plugins of its own
kind (``RegexBasedDetector`` subclasses, the extension mechanism it documents for custom
plugins): fine-grained GitHub tokens, OpenAI project and Anthropic keys, Google API keys, Stripe
test keys, npm, Vault and DigitalOcean tokens, ``Authorization`` headers with an opaque token,
passwords on a command line (``mysql -p…``, ``curl -u user:…``, ``sshpass -p …``,
``--password …``), the passwords of credentials files (``.netrc``, ``.pgpass``), base64 ``user:password`` (a
Docker ``config.json``'s ``auth``, ``Authorization: Basic …``), a bare AWS secret key near its
key id, unquoted assignments as in ``.env`` files, a weak password assigned on a line of its own,
and natural-language statements ("the password is …").

detect-secrets reports secret *values* found on a line; a redactor also needs to know where each
one is and how fast it can be found. This module adds that, and only that: each detector's
regular expressions run over the whole text at once (none of them spans a line), the keyword
rules run only on lines that contain a secret keyword, a match is widened to the end of its token
(detect-secrets' GitHub and GitLab patterns capture only the prefix, its JWT pattern stops
before the signature), and a private key is removed with its whole block. The library's
heuristic filters (UUIDs, templates, ``$VARIABLES``, sequences, indirect references) still decide
what a keyword or entropy match is worth.

Never on the network: detect-secrets can verify a secret against its service, this module never
calls ``verify`` and never reads or changes detect-secrets' global settings. It must never
import from ``store``, ``context``, ``files`` or ``harness``, and never logs the text it redacts.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import ahocorasick_rs
from detect_secrets.filters import heuristic
from detect_secrets.plugins import keyword as _keyword
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

try:
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # a Python without it: no rule is screened (literal_starts)
    _sre = None

__all__ = [
    "DigitalOceanTokenDetector",
    "NpmAccessTokenDetector",
    "VaultTokenDetector",
    "AWSSecretKeyNearIdDetector",
    "AnthropicKeyDetector",
    "AuthorizationHeaderDetector",
    "Base64CredentialsDetector",
    "CommandLinePasswordDetector",
    "NetrcPasswordDetector",
    "GitHubFineGrainedTokenDetector",
    "GoogleApiKeyDetector",
    "HuggingFaceTokenDetector",
    "LinearJwtDetector",
    "LinearNpmDetector",
    "LinearOpenAIDetector",
    "OpenAIProjectKeyDetector",
    "PasswordAssignmentDetector",
    "PgpassPasswordDetector",
    "PasswordStatementDetector",
    "Redactor",
    "SecretAssignmentDetector",
    "StripeTestKeyDetector",
    "UrlCredentialsDetector",
    "default_plugins",
    "pattern_plugin",
    "slug",
]

# --- detectors detect-secrets 1.5 lacks, as detect-secrets plugins --------------------------------
#
# Written for speed on long texts, since every message passes through them:
# * a pattern starts with its literal prefix and checks the word boundary behind it
#   (``sk-(?<![\w-]sk-)``), not ahead (``\bsk-``): Python's engine then jumps from one occurrence
#   of the prefix to the next, 20x faster;
# * a case-insensitive pattern is written in lowercase, so that ``Redactor`` can run it without
#   the flag on the lowercased text (10x faster), and names ``triggers``: lowercase substrings
#   of which a text must hold one for the pattern to match at all.


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub fine-grained personal access tokens (``github_pat_…``)."""

    secret_type = "GitHub Fine-Grained Token"
    wraps = True  # a key of no fixed length: its lines, where a terminal wrapped it, go too
    denylist = (re.compile(r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{22,}"),)


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI keys of every generation (``sk-…``, ``sk-proj-…``, ``sk-svcacct-…``, ``sk-admin-…``).
    detect-secrets' own OpenAI detector needs the ``T3BlbkFJ`` marker that older keys carry."""

    secret_type = "OpenAI Key"
    wraps = True  # a key of no fixed length: its lines, where a terminal wrapped it, go too
    denylist = (re.compile(r"sk-(?<![\w-]sk-)(?:proj-|svcacct-|admin-|None-)?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{20,}"),)


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API and admin keys (``sk-ant-api03-…``, ``sk-ant-admin01-…``)."""

    secret_type = "Anthropic Key"
    wraps = True  # a key of no fixed length: its lines, where a terminal wrapped it, go too
    denylist = (re.compile(r"sk-ant-(?<![\w-]sk-ant-)[A-Za-z0-9_-]{20,}"),)


class AWSSecretKeyNearIdDetector(RegexBasedDetector):
    """A bare AWS secret access key (40 base64 characters) within 1,000 characters before or after
    an access key id (``AKIA…``, ``ASIA…``): the console's CSV, ``aws configure``'s files, what
    someone pastes in a message, in whichever order, with whatever between (a session token of
    900 characters). detect-secrets finds the id anywhere, but the secret only quoted and
    assigned to an ``aws…key`` name. The 40 characters must be a word of their own with a
    capital, a small letter and a digit: a git hash (no capitals) or a piece of a longer run
    stays. ``denylist`` finds the ids (what the screen looks for); ``spans_in`` the secrets
    around them."""

    secret_type = "AWS Secret Access Key"
    denylist = (re.compile(r"(?:AKIA|ASIA)(?<![A-Za-z0-9]AKIA)(?<![A-Za-z0-9]ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"),)
    near = 1_000
    secret = re.compile(
        # a word of its own: after a character that is not base64, or an escape (\n, \t)
        r"(?:(?<![A-Za-z0-9/+])|(?<=\\[nt]))"
        r"(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}\d)[A-Za-z0-9/+]{40}"
        r"(?![\w/+=-])"
    )

    def spans_in(self, text: str) -> Iterator[tuple[int, int]]:
        """Where the secret keys near the ids in ``text`` are, in order. Each part of the text is
        searched once, however many ids are near it (a megabyte of ids costs linear time)."""
        searched = 0
        for key_id in self.denylist[0].finditer(text):
            lo, hi = max(searched, key_id.start() - self.near), key_id.end() + self.near
            # a word that starts before ``hi`` is read whole, and what follows it too
            for m in self.secret.finditer(text, lo, min(len(text), hi + 41)):
                if m.start() >= hi:
                    break
                yield m.span()
            searched = max(searched, hi)

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """The secret keys in ``string`` (detect-secrets' interface)."""
        for start, end in self.spans_in(string):
            yield string[start:end]


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys (``AIza…``)."""

    secret_type = "Google API Key"
    denylist = (re.compile(r"AIza(?<!\wAIza)[0-9A-Za-z_-]{35}"),)


class HuggingFaceTokenDetector(RegexBasedDetector):
    """Hugging Face access tokens (``hf_`` and 34 letters and digits of both cases), which an agent
    that downloads models meets in ``HF_TOKEN`` and in the ``huggingface-cli`` output."""

    secret_type = "Hugging Face Token"
    denylist = (
        re.compile(r"hf_(?<!\whf_)(?=[a-z0-9]{0,33}[A-Z])(?=[A-Z0-9]{0,33}[a-z])[A-Za-z0-9]{34}(?![A-Za-z0-9_])"),
    )


class NpmAccessTokenDetector(RegexBasedDetector):
    """npm access tokens (``npm_`` and 36 letters and digits of both cases) wherever they are:
    detect-secrets finds one only on an ``.npmrc`` ``_authToken`` line (``npm_config_…``
    variables stay: they hold underscores)."""

    secret_type = "npm Access Token"
    denylist = (
        re.compile(r"npm_(?<!\wnpm_)(?=[a-z0-9]{0,35}[A-Z])(?=[A-Z0-9]{0,35}[a-z])[A-Za-z0-9]{36}(?![A-Za-z0-9_])"),
    )


class VaultTokenDetector(RegexBasedDetector):
    """HashiCorp Vault service, batch and recovery tokens (``hvs.…``, ``hvb.…``, ``hvr.…``: 24 or
    more letters and digits of both cases)."""

    secret_type = "Vault Token"
    denylist = (
        re.compile(
            r"(?:hvs\.|hvb\.|hvr\.)(?<!\whv.\.)(?=[\w-]{0,200}\d)(?=[a-z0-9_-]{0,200}[A-Z])(?=[A-Z0-9_-]{0,200}[a-z])[\w-]{24,}"
        ),
    )


class DigitalOceanTokenDetector(RegexBasedDetector):
    """DigitalOcean personal access, OAuth and refresh tokens (``dop_v1_``, ``doo_v1_``,
    ``dor_v1_`` and 64 hex digits)."""

    secret_type = "DigitalOcean Token"
    denylist = (re.compile(r"(?:dop_v1_|doo_v1_|dor_v1_)(?<!\wdo._v1_)[a-f0-9]{64}(?![\w-])"),)


class StripeTestKeyDetector(RegexBasedDetector):
    """Stripe secret and restricted *test* keys (detect-secrets covers the live ones)."""

    secret_type = "Stripe Test Key"
    denylist = (
        re.compile(r"sk_test_(?<!\wsk_test_)[0-9a-zA-Z]{24,}"),
        re.compile(r"rk_test_(?<!\wrk_test_)[0-9a-zA-Z]{24,}"),
    )


class LinearOpenAIDetector(OpenAIDetector):
    """detect-secrets' OpenAI detector (keys carrying the ``T3BlbkFJ`` marker) with its pattern
    anchored at a token start: the library's ``sk-[A-Za-z0-9-_]*…`` restarts at every ``sk-`` of a
    run and scans to its end (a hostile 300 kB tool output of ``sk-sk-…`` took 149 s)."""

    denylist = [re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]*?[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}")]


class LinearJwtDetector(JwtTokenDetector):
    """detect-secrets' JWT detector (a match must still decode as a JWT: its own check) with its
    pattern anchored at a token start, for the same reason (``eyJeyJ…`` was quadratic)."""

    denylist = [re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+\.?[A-Za-z0-9_.+/=-]*?")]


class LinearNpmDetector(NpmDetector):
    """detect-secrets' npm detector (an ``.npmrc`` auth token line) with a bounded registry part
    and a trigger: its ``//.+/:_authToken=`` scans to the end of the line at every ``//`` (a long
    line of URLs was quadratic)."""

    triggers = ("_authtoken",)
    denylist = [re.compile(r"//\S{1,256}?/:_authtoken=\s*(npm_\S+|[a-f0-9-]{36})", re.IGNORECASE)]


class UrlCredentialsDetector(BasicAuthDetector):
    """detect-secrets' basic-auth detector (the password of a URL's ``user:password@host`` part), also
    where the user is empty, as Redis URLs have it (``redis://`` then ``:password@cache:6379/0``)."""

    denylist = [
        re.compile(
            r"://[^:/?#\[\]@!$&'()*+,;=\s]*:([^:/?#\[\]@!$&'()*+,;=\s]+)@",
        ),
    ]


class AuthorizationHeaderDetector(RegexBasedDetector):
    """The credential of an HTTP ``Authorization`` header (``Bearer``, ``Token``, ``Basic``), in
    a header line, a curl ``-H`` argument or a headers mapping. A JWT there is also caught by
    detect-secrets' JWT detector; this one catches opaque tokens. The value must mix letters and
    digits, so ``Bearer YOUR_API_KEY`` placeholders stay."""

    secret_type = "Authorization Header"
    triggers = ("authorization",)
    denylist = (
        re.compile(
            r"authorization[\"']?\s*[:=,]\s*[\"']?(?:bearer|token|basic)\s+"
            r"((?=[a-z._~+/=-]*\d)(?=[\d._~+/=-]*[a-z])[a-z0-9._~+/=-]{12,})",
            re.IGNORECASE,
        ),
    )


# a command's arguments before the one that holds the password: at most 30 words, on its line
_ARGS = r"(?:[ \t]+[^\s|;&<>]+){0,30}?[ \t]+"
# the password itself: quoted (spaces and all) or a word; never a variable, a placeholder or a
# template (``$PASS``, ``<password>``, ``{{pass}}``, ``%PASS%``, ``…``, ``PASSWORD``,
# ``NEW_PASSWORD``, ``YOUR_TOKEN``), which name a secret without holding it; any other word in
# capitals is a password (NEWPASS after mysqladmin's ``password``); a word never holds a backtick (command
# substitution, or Markdown around the command)
_NOT_PLACEHOLDER = (
    r"(?![$<{%…]|\.\.\.|(?:[A-Z]*_[A-Z_]*|(?:NEW|OLD|YOUR|MY)?(?:PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|KEY)S?"
    r"|PASS|PWD|PASSPHRASE|NEW|USER|VALUE|STRING|TEXT|STR|FILE)(?![\w-]))"
)
_QUOTED_OR_WORD = (
    rf"(?:\\*'{_NOT_PLACEHOLDER}([^'\n]+?)\\*'"  # 'quoted', also \'escaped\' in a JSON string
    rf'|\\*"{_NOT_PLACEHOLDER}([^"\n]+?)\\*"'
    rf"|{_NOT_PLACEHOLDER}([^\s'\"`\\]+))"
)


_ANYWHERE_EXAMPLE = r"placeholder|change[-_]?me|xxxx|(?<![a-z0-9])example(?![a-z0-9])"
_YOUR = r"[<{\[$]?your"
_EXAMPLE_WORDS = rf"^['\"]?{_YOUR}|{_ANYWHERE_EXAMPLE}"
"""What a value that says it is an example holds (``changeme1``, ``xxxxxxxx``, ``example-token``;
not the ``…EXAMPLEKEY`` of a whole word), or starts with (``your-api-key``, ``<your token>``: a
``your`` further in, as in ``Secr3t_your``, is a password's own)."""
_NOT_EXAMPLE = rf"(?!\\*['\"]?(?i:{_YOUR}|[^\s'\"]{{0,64}}?(?:{_ANYWHERE_EXAMPLE})))"
"""Not a value that says it is an example (``--api-key=your-api-key``, ``--token=xxxx``)."""
_HTPASSWD_OPTIONS = r"(?:[ \t]+-[A-Za-z]+(?:[ \t]+\d+)?)"
"""An option of htpasswd's, with the number of ``-C`` or ``-r``."""
_WORD = r"[ \t]+[^\s|;&<>-][^\s|;&<>]*"
"""A command's argument that is not an option."""


class CommandLinePasswordDetector(RegexBasedDetector):
    """A password given to a command on its command line, where a shell history, a tool call's
    arguments or a CI log shows it: MySQL's and MariaDB's ``-pPASS`` (attached: ``-p`` alone asks
    for it, ``-P`` is the port), ``--password``, ``--token``, ``--api-key``, ``--access-token``
    or ``--auth-token`` of any command, with ``=`` or a space, any word (``hunter``, ``abcdef``)
    but a type, a word of a sentence, a placeholder or a word that names a password or key (not
    ``--token string``, ``the --password flag``, ``PASSWORD_FILE``, ``mypassword``),
    htpasswd's ``-b`` password (``htpasswd -b FILE USER PASS``), ``mysqladmin … password NEW``,
    the ``-p`` of a registry or cloud ``login`` command (``docker login``, ``az login``; not a
    port), curl's ``-u user:pass`` and ``--user user:pass``, ``sshpass -p``, ``redis-cli -a``,
    ``sqlcmd -P``. Only the password goes (not the user name)."""

    secret_type = "Command-Line Password"
    denylist = (
        # the clients only: mysql_config, mysqlclient (pkg-config) and mysql-server are followed
        # by compiler flags or docker options, where -pthread or -pipe is no password
        re.compile(
            r"(?:mysql|mariadb)(?<![\w.-]mysql)(?<![\w.-]mariadb)"
            r"(?:-?(?:dump|admin|import|show|check|binlog|slap|pump))?" + _ARGS + "-p" + _QUOTED_OR_WORD
        ),
        re.compile(
            # each option whole before the look behind it: the screen then looks for the options,
            # not for every "--"
            "(?:"
            + "|".join(rf"--{o}(?<![\w-]--{o})" for o in ("password", "token", "api-key", "access-token", "auth-token"))
            # after a space, a word that starts with "-" is the next option (``--token --json``)
            + r")(?:=|[ \t]+(?!-))"
            + _NOT_EXAMPLE
            # a lowercase letter and a digit or symbol in its first 256 characters (a bounded look:
            # a megabyte of "--token=" costs linear time)
            + r"(?=(?:\\*'[^'\n]{0,256}|\\*\"[^\"\n]{0,256}|[^\s'\"]{0,256})[a-z])"
            r"(?=(?:\\*'[^'\n]{0,256}|\\*\"[^\"\n]{0,256}|[^\s'\"]{0,256})[\d!@#$%^&*+=?~_.-])" + _QUOTED_OR_WORD
        ),
        # a password or token may be any word (``hunter``, ``abcdef``: no digit needed), but not a
        # --help's type, a word of a sentence about the option (``--password string``, ``the
        # --token flag``, ``error: --token required``, ``--token expired,``) or a value that names
        # a password (``mypassword``: an example), or, for a token or key, one that names a token
        # or key (``mytoken``); a password may hold "key" or "token" (``monkey``, ``keyboardcat``).
        # A token of letters only follows its option by one space (or "="): a --help's columns
        # put more before the option's description (``--token    GitHub token``)
        *(
            re.compile(
                "(?:"
                + "|".join(rf"--{o}(?<![\w-]--{o})" for o in options)
                + rf")(?:=|{space})"
                + _NOT_EXAMPLE
                + r"(?!(?i:string|text|value|str|password|pass|secret|flag|option|argument|arg|parameter|param"
                r"|switch|and|or|the|to|for|of|is|as|with|in|on|if|when|that|this|must|can|will|should|none"
                r"|null|true|false|prompt|stdin|file|env|required|missing|invalid|expired|optional|deprecated"
                r"|needed|empty|unset|ignored|not)[,.;:!?]*(?![^\s'\"`\\]))"
                rf"(?!\\*['\"]?[^\s'\"]{{0,64}}?(?i:{names}))" + _QUOTED_OR_WORD
            )
            for options, names, space in (
                (("password",), "password", r"[ \t]+(?!-)"),
                (("token", "api-key", "access-token", "auth-token"), "password|token|key", r"[ \t](?![ \t-])"),
            )
        ),
        # htpasswd's -b takes the password after the file (-n: no file) and the user name
        re.compile(
            r"htpasswd(?<![\w.-]htpasswd)(?=" + _HTPASSWD_OPTIONS + r"*?[ \t]+-[A-Za-z]*b)"
            r"(?:(?="
            + _HTPASSWD_OPTIONS
            + r"*?[ \t]+-[A-Za-z]*n)"
            + _HTPASSWD_OPTIONS
            + r"+"
            + _WORD
            + r"|(?!"
            + _HTPASSWD_OPTIONS
            + r"*?[ \t]+-[A-Za-z]*n)"
            + _HTPASSWD_OPTIONS
            + r"+"
            + _WORD
            + _WORD
            + r")[ \t]+"
            + _QUOTED_OR_WORD
        ),
        # mysqladmin's "password NEW" sets a new password
        re.compile(
            r"(?:mysqladmin|mariadb-admin)(?<![\w.-]mysqladmin)(?<![\w.-]mariadb-admin)"
            + _ARGS
            + r"password[ \t]+"
            + _QUOTED_OR_WORD
        ),
        re.compile(
            r"curl(?<![\w.-]curl)" + _ARGS + r"(?:-u[ \t]*|--user(?:=|[ \t]+))"
            rf"""(?:\\*'[^':\n]*:{_NOT_PLACEHOLDER}([^'\n]+?)\\*'|\\*"[^":\n]*:{_NOT_PLACEHOLDER}([^"\n]+?)\\*"|"""
            rf"""[^\s'":]*:{_NOT_PLACEHOLDER}([^\s'"`\\]+))"""
        ),
        re.compile(r"sshpass(?<![\w.-]sshpass)" + _ARGS + r"-p[ \t]*" + _QUOTED_OR_WORD),
        # the login command of a tool whose -p is the password (not ``gh auth login -p ssh``, nor
        # any later -p on a line that says "login": ``pytest -k login -p no:cov``, ``mkdir -p``);
        # not a port (``ssh -p 2222`` after it in the same line), nor another option
        re.compile(
            r"login(?<![\w-]login)(?:"
            + "|".join(
                rf"(?<![\w.-]{c}[ \t]login)(?<={c}[ \t]login)"
                for c in ("docker", "podman", "buildah", "nerdctl", "skopeo", "oras", "oc", "az", "cf", "registry")
            )
            + ")"
            + _ARGS
            + r"-p[ \t]*(?![\d]+(?![^\s'\"`\\])|-)"
            + _QUOTED_OR_WORD
        ),
        re.compile(r"redis-cli(?<![\w.-]redis-cli)" + _ARGS + r"(?:-a[ \t]*|--pass[ \t]+)" + _QUOTED_OR_WORD),
        re.compile(r"sqlcmd(?<![\w.-]sqlcmd)" + _ARGS + r"-P[ \t]*" + _QUOTED_OR_WORD),
    )


class NetrcPasswordDetector(RegexBasedDetector):
    """The password of a ``.netrc`` entry (``machine HOST login USER password PASS``, on one line
    or several), which curl, git, ftp and pip read. Only where a ``machine`` (or ``default``)
    entry leads to it, through nothing but netrc's own words, with a ``login`` or ``account``
    among them (or, right after ``machine``, a host name with a dot): prose that says "machine"
    and "password" stays, and so does "the default password is admin" or "machine learning
    password manager"."""

    secret_type = "Netrc Password"
    denylist = (
        re.compile(
            r"(?:machine[ \t]+\S+|default)(?<![\w-]default)"
            # a login or account among the entry's words (a bounded look: four words at most)
            r"(?=(?:\s+(?:login|account|port)\s+\S+){0,3}\s+(?:login|account)\s)"
            r"(?:\s+(?:login|account|port)\s+\S+){1,4}\s+password\s+" + _QUOTED_OR_WORD
        ),
        # (its lines may be escaped newlines of a JSON string)
        re.compile(r"machine[ \t]+[\w-]+(?:\.[\w-]+)+(?:\s|\\[nrt])+password\s+" + _QUOTED_OR_WORD),
    )


_PGPASS_HEAD = re.compile(r"""(?:^|\\[nr]|["'])[ \t]*\Z""", re.MULTILINE)
"""Where a ``.pgpass`` line starts: a line, a string, an escaped line in a JSON string."""
_PGPASS_FIELD = r"(?:[^\s:\\\"']|\\[:\\])+"
"""A field of a ``.pgpass`` line: any characters but a colon, which is escaped (``\\:``)."""


class PgpassPasswordDetector(RegexBasedDetector):
    """The password of a ``.pgpass`` line (``hostname:port:database:username:password``, which
    psql, pg_dump and libpq read; ``*`` matches any host, port, database or user): a line, a
    string (``echo "…" > ~/.pgpass``) or an escaped line in a JSON string of exactly those five
    fields, whose port is a number or ``*``, whose host is not a number and whose database is not
    one (``10:12:30:45:00`` and ``rg --vimgrep``'s ``a.py:10:4:text`` stay)."""

    secret_type = "Pgpass Password"
    # from the colon before the port (the engine jumps from one colon to the next; a pattern that
    # starts where a line starts is tried at every position); ``accept`` reads the host before it
    denylist = (
        re.compile(
            rf":(?:\d{{1,5}}|\*):(?!\d+:){_PGPASS_FIELD}:{_PGPASS_FIELD}:({_PGPASS_FIELD})"
            r"[ \t]*(?=$|\\[nr]|[\"'])",
            re.MULTILINE,
        ),
    )

    def accept(self, m: re.Match[str]) -> bool:
        """Whether the line is the five fields alone, with a host that is not a number, and the
        password is one, not a placeholder (``PASSWORD``, ``your_password``)."""
        text, start = m.string, m.start()
        while start > 0 and text[start - 1] not in " \t\n\"':" and text[start - 2 : start] not in ("\\n", "\\r"):
            start -= 1
        host = text[start : m.start()]
        if not host or host.isdigit() or _PGPASS_HEAD.search(text, max(0, start - 256), start) is None:
            return False
        value = m.group(1)
        return not (
            _VARIABLE_NAME.fullmatch(value)
            or value.isupper()
            or _EXAMPLE.search(value)
            or heuristic.is_templated_secret(value)
            or heuristic.is_prefixed_with_dollar_sign(value)
        )

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """The passwords in ``string`` (detect-secrets' interface: ``accept`` for each match)."""
        for rx in self.denylist:
            for m in rx.finditer(string):
                if self.accept(m):
                    yield m.group(1)


class Base64CredentialsDetector(RegexBasedDetector):
    """``user:password`` in base64, as a Docker ``config.json`` keeps it (``"auth": "…"``, in
    ``auths``), an ``.npmrc`` (``_auth = …``) and an HTTP ``Authorization: Basic …`` header
    (``authorization-header`` takes one with a digit; ``user:pass`` encodes without one). The
    value must decode to a user and a password (``"auth": "oauth2"`` stays)."""

    secret_type = "Base64 Credentials"
    denylist = (
        re.compile(r'"auth(?:"|\\+")[ \t]*:[ \t]*\\*"([A-Za-z0-9+/]{8,}={0,2})(?![\w+/=-])'),
        re.compile(r'_auth(?<!\w_auth)[ \t]*=[ \t]*"?([A-Za-z0-9+/]{8,}={0,2})(?![\w+/=-])'),
        # "Basic" whole, so that the screen looks for the word, not for every "b"
        re.compile(
            r"(?:Basic|basic|BASIC)(?<!\wBasic)(?<!\wbasic)(?<!\wBASIC)[ \t]+([A-Za-z0-9+/]{4,}={0,2})(?![\w+/=-])"
        ),
    )

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """The values in ``string`` that decode to a user and a password (a match's check)."""
        for rx in self.denylist:
            for m in rx.finditer(string):
                if _user_and_password(m.group(1)):
                    yield m.group(1)


def _user_and_password(value: str) -> bool:
    """Whether ``value`` is base64 of ``user:password``."""
    try:
        raw = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, colon, password = raw.partition(":")
    return bool(user and colon and password) and raw.isprintable()


class PasswordStatementDetector(RegexBasedDetector):
    """A secret given in a sentence: "the password is hunter2-Secret", "my API key was
    3f9a…". detect-secrets' keyword detector needs an assignment (``=``, ``:``); people and
    agents also write prose. The value must contain a digit or a symbol besides letters, so
    "the secret is patience" stays."""

    secret_type = "Password Statement"
    triggers = (" is ", " was ", " be ")
    denylist = (
        re.compile(
            r"\b(?:password|passphrase|passcode|passwd|api[ _-]?key|secret[ _-]?key|access[ _-]?token"
            r"|auth[ _-]?token)s?\s+(?:is|was|is now|would be|will be)\s*:?\s+[\"'`]?"
            r"((?=[^\s\"'`]*[a-z])(?=[^\s\"'`]*[\d!@#$%^&*+=?~_-])[^\s\"'`]{6,}?)[\"'`]?(?=[\s,;)]|[.!?](?:\s|$)|$)",
            re.IGNORECASE,
        ),
    )


_UNQUOTED = r"(?:[^\s\"'`;,()\[\]{}<>\\&@]|&(?![\w.-]+=)|@(?!(?:[\w-]+\.)+[a-z]{2,}(?::\d+)?(?:/|[\s\"'`]|$)))"
"""A character of an unquoted value: not a space, quote, separator, bracket or escape, nor an
``&`` that starts the next parameter of a query string (a password may hold an ``&``), nor an
``@`` before a host name (a clone URL whose user is ``x-access-token`` keeps its host)."""


class SecretAssignmentDetector(RegexBasedDetector):
    """An unquoted value assigned to a name that ends in a secret word (or a quoted one assigned
    to a token name, which detect-secrets' keyword detector lacks), as in ``.env`` files,
    shell exports, INI and YAML (``AWS_SECRET_ACCESS_KEY=…``, ``DB_PASSWORD: …``,
    ``?access_token=…``). detect-secrets' keyword detector requires quotes for text of unknown
    type (its unquoted rules flag ``const apiKey = await getKey(model)``: measured, 94 false
    positives on two real sessions). The value must be 8+ characters with a letter and a digit
    and end the expression, so ``TOKEN: string`` and ``key = make_key2(x)`` stay; it may be of
    any length."""

    secret_type = "Secret Assignment"
    triggers = ("key", "secret", "token", "pass", "pwd", "credential")
    denylist = (
        re.compile(
            r"(?:key|secret|token|passw(?:or)?d|pwd|pass|passphrase|credentials?)[\"']?[ \t]*[=:][ \t]*"
            # the value (``_UNQUOTED``), taken whole (possessive) and judged by ``accept``: the
            # pattern never fails after the name, so the search goes on after the value, and a
            # run of ``key=key=…`` costs one pass, not one pass of the value per name in it
            rf"({_UNQUOTED}*+)",
            re.IGNORECASE,
        ),
        # a quoted value assigned to a token name (``"access_token": "…"``, ``SessionToken``,
        # ``auth_token = '…'``, quotes escaped in JSON strings too, at any depth): detect-secrets'
        # keyword detector, which takes quoted values, knows no "token". The rule looks at 4,096
        # characters of it (an AWS session token is about 900), and takes a longer one whole
        # (``tail``): the value ends at a quote, so each try scans its own part of the text,
        # however hostile. On 38M characters of public text (the Pi session, the demo, this
        # repository, LoCoMo) it matched one published API token
        re.compile(
            r"token(?:\\*[\"'])?[ \t]*[=:][ \t]*\\*[\"']"
            r"((?=[^\s\"'`\\]{0,4095}\d)(?=[^\s\"'`\\]{0,4095}[a-z])"
            r"(?:[^\s\"'`\\]{8,4095}+(?=\\*[\"'])|[^\s\"'`\\]{4096}))",
            re.IGNORECASE,
        ),
    )
    tail = re.compile(_UNQUOTED + "*+")
    """What a value that fills the window is widened over to its end (``_Rule``)."""

    def accept(self, m: re.Match[str]) -> bool:
        """Whether a match of the unquoted rule is a secret: 8+ characters with a letter and a
        digit in its first 511, that end the expression (``key = make_key2(x)`` stays) unless
        there are 512 or more of them (a secret is not less secret for being long: a base64
        private key in a CI variable, a signed token). Any match of the quoted rule is."""
        if m.re.pattern != self.denylist[0].pattern:
            return True
        value = m.group(1)
        if len(value) < 8 or (len(value) < 512 and m.string[m.end(1) : m.end(1) + 1] in _OPENS):
            return False
        head = value[:511]
        return _DIGIT.search(head) is not None and _LETTER.search(head) is not None and not _EXAMPLE.search(head)

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """The secret values in ``string`` (detect-secrets' interface: ``accept`` for each match)."""
        for rx in self.denylist:
            for m in rx.finditer(string):
                if m.group(1) and self.accept(m):
                    yield m.group(1)


_OPENS = frozenset("()[]{}<>")
"""What an unquoted value may stop at without ending the expression (a call, an index)."""
_EXAMPLE = re.compile(_EXAMPLE_WORDS, re.IGNORECASE)
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[A-Za-z]")


_PASSWORD_END = (
    r"(?:(?P<line>(?:[ \t]+#[^\n\\]*)?[ \t]*(?=$|\\[nr]|[\"']))|(?P<command>[ \t]+)(?=[\w./~-])"
    r"|(?P<query>(?=;|&[\w.-]+=)))?"
)
"""What follows a password assigned on a line of its own (nothing but a comment), for one
command (the command) or in a query or connection string (the next parameter, a ``;``); none of
these: not such a password (``PasswordAssignmentDetector.accept``)."""
_PASSWORD_VALUE = r"((?:[^\s\"'`;,()\[\]{}<>\\&]|&(?![\w.-]+=))*+)"
"""A password's value: up to a space, quote or separator, or an ``&`` that starts the next
parameter of a query string (``password=hunter2&user=bob``; a password may hold an ``&``)."""


class PasswordAssignmentDetector(RegexBasedDetector):
    """A password assigned on a line of its own, whatever its length or letters, as config files,
    ``.env`` files, ``~/.my.cnf``, YAML and ``env`` output hold it (``password: hunter2``,
    ``DB_PASSWORD=secret``, ``export PGPASSWORD=letmein``, ``- POSTGRES_PASSWORD=…`` in a
    compose file, ``"MYSQL_PWD=…"`` in ``docker inspect``'s ``Env``), or for one command
    (``PGPASSWORD=hunter psql -U app``): ``secret-assignment`` needs
    8 characters and a digit, which a weak password, the one most often written down, lacks.
    The line (or a string, or an escaped line in a JSON string) must be the assignment alone, so
    a call's ``password=password,`` or ``f(password=x)`` stays, and the value must not be what
    code assigns: a type (``password: str``, ``String!``), a variable, an attribute or another
    name of the password (``password = db_password``, ``args.password``), a path, a template,
    a placeholder (``changeme``, ``your-password``, ``xxxx``, ``****``) or a YAML alias."""

    secret_type = "Password Assignment"
    triggers = ("pass", "pwd")
    # each pattern starts with its word (the engine jumps from one to the next; a pattern that
    # starts where a line starts is tried at every position); ``accept`` reads the name's start
    # and what is before it on the line
    denylist = (
        re.compile(
            r"pass(?:w(?:or)?d|phrase|code)?"
            r"[\"']?[ \t]*(?:=|:(?=[ \t]))[ \t]*"  # YAML's colon has a space after it (not "passwd:gecos")
            # the value, taken whole (possessive) and judged by ``accept``, as is what follows it:
            # the pattern never fails after the name, so the search goes on after the value
            + _PASSWORD_VALUE
            + _PASSWORD_END,
            re.IGNORECASE,
        ),
        re.compile(
            r"pwd[\"']?[ \t]*(?:=|:(?=[ \t]))[ \t]*" + _PASSWORD_VALUE + _PASSWORD_END,
            re.IGNORECASE,
        ),
        # a passphrase of several words, unquoted, to the end of its line (but a comment): YAML's
        # "password: correct horse battery staple", INI's "password = …" (spaces around "=": a
        # shell's NAME=word is one word, and what follows it a command); ``accept`` tells it
        # from a sentence
        re.compile(
            r"pass(?:w(?:or)?d|phrase|code)?[\"']?(?::|[ \t]+=|=(?=[ \t]))[ \t]+"
            r"([^\s\"'`#\\][^\s\\]{0,63}(?:[ \t]+[^\s#\\][^\s\\]{0,63}){1,7}+)"
            r"(?:[ \t]+#[^\n\\]*)?[ \t]*(?=$|\\[nr])",
            re.IGNORECASE | re.MULTILINE,
        ),
    )

    def accept(self, m: re.Match[str]) -> bool:
        """Whether the match is a password assigned on a line of its own, for one command or in a
        query string, and its value is a password, not what code or a template assigns."""
        text, word = m.string, m.start()
        start = word
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
            if text[start - 1] in "nrt" and text[start - 2 : start - 1] == "\\":
                break  # an escaped newline in a JSON string ends the line before the name
            start -= 1
        after_separator = start < word and text[word - 1] in "_.-"
        kind = text[word : word + 5].lower()
        if kind.startswith("pwd"):
            # "MYSQL_PWD", a connection string's ";Pwd=", not the shell's "PWD" or "OLDPWD"
            if not after_separator and not (start == word and text[start - 1 : start] == ";"):
                return False
        elif kind not in ("passw", "passp", "passc") and start < word and not after_separator:
            return False  # "pass" alone or after a separator ("DB_PASS"), not "bypass"
        value = m.group(1)
        if not 4 <= len(value) <= 256:
            return False
        words = value.split()
        bare = kind[:4] == "pass" and kind not in ("passw", "passp", "passc") and start == word
        if bare and "=" not in text[word : m.start(1)] and _TEST_NAME.fullmatch("".join(words)):
            # "pass: skip", "Pass: Alice", "PASS: src/app.test.js": a test's result, a form's word
            # (with a colon: "PASS=letmein" assigns a password, letters only or not)
            return False
        nss = kind == "passw" and start == word and text[word : m.start(1)].lower().startswith("passwd:")
        if nss and words[0].lower() in _NSS_SOURCES:
            return False  # nsswitch.conf's "passwd: compat", "passwd: files systemd"
        if m.re.pattern == self.denylist[2].pattern:  # a passphrase of several words
            return (
                _LINE_HEAD.search(text, max(0, start - 256), start) is not None
                and not _not_a_password(words[0])
                and not any(_PROSE_WORD.fullmatch(w) for w in words)
            )
        if start > 0 and text[start - 1] in "?&;" and text[m.start(1) - 1] == "=":
            # a parameter of a query string (?password=…&user=…) or a connection string
            # (Server=db;User Id=sa;Password=…;); not a call's name in code (``b=1;pwd=getpw(u);``)
            return text[m.end(1) : m.end(1) + 1] != "(" and not _not_a_password(value)
        if m.group("line") is None and m.group("command") is None and m.group("query") is None:
            return False
        if m.group("command") is not None:
            # for one command: no space around "=", and a command's start before the name
            if not text[word : m.start(1) - 1].isalpha() or text[m.start(1) - 1] != "=":
                return False
            head = _COMMAND_HEAD
        elif (
            m.group("line") is not None
            and text[m.start(1) - 1] == "="
            and text[word : m.start(1) - 1].isalpha()
            and _COMMAND_HEAD.search(text, max(0, start - 256), start) is not None
        ):
            # the last of a line's or a string's assignments: libpq's "dbname=app user=app
            # password=…", a shell's "PGHOST=db PGPASSWORD=…"
            return not _not_a_password(value)
        else:
            head = _LINE_HEAD
        return head.search(text, max(0, start - 256), start) is not None and not _not_a_password(value)

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """The passwords in ``string`` (detect-secrets' interface: ``accept`` for each match)."""
        for rx in self.denylist:
            for m in rx.finditer(string):
                if self.accept(m):
                    yield m.group(1)


_TEST_NAME = re.compile(r"[A-Za-z/._-]+")
"""What a bare ``pass`` holds in a test's output or a form (a name, a test file), not a password:
letters, without a digit or any other symbol."""
_PROSE_WORD = re.compile(
    r"(?i:a|an|the|is|are|was|were|be|been|it|its|this|that|these|those|to|of|for|in|on|at|by|from|with"
    r"|and|or|not|no|if|as|you|your|we|our|i|my|me|use|used|see|set|will|can|must|should|may|what|when"
    r"|which|who|how|here|there|required|optional|default|none|null|true|false|etc)"
    r"|.*[.,;:!?)]|\(.*"
)
"""A word of a sentence (or one that ends one), which a passphrase of several words never holds."""
_NSS_SOURCES = frozenset(
    ("files", "compat", "db", "nis", "nisplus", "ldap", "sss", "systemd", "winbind", "hesiod")
    + ("extrausers", "altfiles", "cache", "mymachines", "resolve", "myhostname", "dns", "mdns")
)
"""The sources nsswitch.conf names for its ``passwd`` database."""


_LINE_HEAD = re.compile(r"""(?:^|\\n|["'])[ \t]*(?:(?:export|set|setenv|env)[ \t]+|-[ \t]+)?\Z""", re.MULTILINE)
"""What is before the name of a password assigned on a line of its own: the line's start (or a
string's, or an escaped line's in a JSON string), ``export``, ``set``, a YAML list's ``-``."""
_COMMAND_HEAD = re.compile(
    r"""(?:^|\\n|["']|[;&|(][ \t])[ \t]*(?:(?:env|sudo|sudo[ \t]+env)[ \t]+)?(?:[\w.-]+=[^\s"'`;&|]*[ \t]+){0,8}\Z""",
    re.MULTILINE | re.IGNORECASE,
)
"""What is before the name of a password assigned for one command: a command's start (a line's,
a string's, after ``&&``, ``;``, ``|`` or ``(``), ``env`` or ``sudo``, other assignments."""


_NOT_A_PASSWORD = re.compile(
    # a type, a flag, an empty or hidden value: what a schema, a type hint or a form says
    r"(?:str|string|text|bytes|char|varchar|int|integer|number|bool|boolean|any|object|none|null|nil|true|false"
    r"|yes|no|on|off|required|optional|undefined|empty|hidden|masked|redacted|sensitive|secretstr|secretbytes"
    r"|prompt|stdin|file|env)[!?]?"
    # a variable, an attribute, a path, a template, a YAML alias or anchor
    r"|[a-z]+(?:_[a-z]+)+|[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+|[/~.*&$%!].*|.*\{\{.*"
    # another name of the password, or a placeholder
    r"|.*(?:pass|pwd|\.\.\.|…).*",
    re.IGNORECASE,
)


def _not_a_password(value: str) -> bool:
    """Whether an assigned value is what code, a schema or a template holds, not a password."""
    return (
        _NOT_A_PASSWORD.fullmatch(value) is not None
        or _EXAMPLE.search(value) is not None
        or len(set(value.lower())) == 1  # ****, xxxx
        or heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_templated_secret(value)
        or heuristic.is_not_alphanumeric_string(value)
    )


def default_plugins(*, generic: bool = True) -> list[BasePlugin]:
    """The detectors a ``Redactor`` runs by default, most specific first (where two overlap, the
    first names the secret). ``generic=False`` leaves out the four that judge a value by the
    words around it rather than by its shape (keyword assignments, unquoted secret and password
    assignments, statements).

    Left out on purpose, by measurement (bench/redaction.py, docs/files.md): detect-secrets'
    high-entropy string detectors (they flag package-lock integrity hashes, content hashes and
    tool-call ids, and nothing else), its public-IP detector (an address is not a secret), and its
    Artifactory, Cloudant, IBM and SoftLayer detectors (no hit on any measured text, and together
    slower than all the others)."""
    plugins: list[BasePlugin] = [
        PrivateKeyDetector(),
        AnthropicKeyDetector(),
        LinearOpenAIDetector(),
        OpenAIProjectKeyDetector(),
        GitHubTokenDetector(),
        GitHubFineGrainedTokenDetector(),
        GitLabTokenDetector(),
        AWSKeyDetector(),
        AWSSecretKeyNearIdDetector(),
        AzureStorageKeyDetector(),
        GoogleApiKeyDetector(),
        HuggingFaceTokenDetector(),
        NpmAccessTokenDetector(),
        VaultTokenDetector(),
        DigitalOceanTokenDetector(),
        SlackDetector(),
        StripeDetector(),
        StripeTestKeyDetector(),
        SendGridDetector(),
        TwilioKeyDetector(),
        MailchimpDetector(),
        LinearNpmDetector(),
        PypiTokenDetector(),
        SquareOAuthDetector(),
        DiscordBotTokenDetector(),
        TelegramBotTokenDetector(),
        LinearJwtDetector(),
        AuthorizationHeaderDetector(),
        CommandLinePasswordDetector(),
        NetrcPasswordDetector(),
        PgpassPasswordDetector(),
        Base64CredentialsDetector(),
        UrlCredentialsDetector(),
    ]
    if generic:
        plugins += [
            KeywordDetector(),
            SecretAssignmentDetector(),
            PasswordAssignmentDetector(),
            PasswordStatementDetector(),
        ]
    return plugins


def pattern_plugin(name: str, pattern: str | re.Pattern[str]) -> RegexBasedDetector:
    """A detect-secrets plugin for one regular expression, reported as ``name``: its match is the
    secret, or its first capturing group where that does not start the match (``key=(\\w+)``)."""
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    attrs = {"secret_type": name, "denylist": (compiled,), "exact": True}
    plugin: RegexBasedDetector = type(f"Pattern_{slug(name)}", (RegexBasedDetector,), attrs)()
    return plugin


def slug(secret_type: str) -> str:
    """The name a secret type has in ``[REDACTED:<name>]``: ``"GitHub Token"`` → ``github-token``."""
    return re.sub(r"[^a-z0-9]+", "-", secret_type.lower()).strip("-")


# --- finding where the secrets are ------------------------------------------------------------------

_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
"""A token detector's match is widened over these: GitHub's and GitLab's patterns capture only
the prefix, the JWT pattern stops before the signature, Stripe's counts a fixed length."""

_KEYWORD_TRIGGER = re.compile(_keyword.DENYLIST_REGEX)
_KEYWORD_TRIGGER_ANY_CASE = re.compile(_keyword.DENYLIST_REGEX, re.IGNORECASE)
_KEYWORD_RULES: Final[Mapping[re.Pattern[str], int]] = {
    # detect-secrets picks its rules by file type; text in a session has none, and the rules that
    # require quotes are its choice for unknown files (measured: the unquoted ones flag prose)
    **_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
}
_KEYWORD_RULES_LOWERED: Final[Mapping[re.Pattern[str], int]] = {
    # the same without the flag, for a lowercased line: a case-insensitive pattern that starts
    # with a list of words is tried at every position, 10x slower (1 MB of ``key=``: 1.5 s)
    re.compile(rx.pattern, rx.flags & ~re.IGNORECASE): group
    for rx, group in _KEYWORD_RULES.items()
}
_KEYWORD_WORDS = "(" + "|".join(_keyword.DENYLIST) + r")\w*"
"""How the rules that start with a keyword start: the keyword and the rest of its word."""


def _at_keywords(rules: Mapping[re.Pattern[str], int]) -> dict[re.Pattern[str], tuple[int, bool]]:
    """``rules``, each with its group and whether it starts with a keyword: such a rule is tried
    only where ``_KEYWORD_TRIGGER`` found one (``match``), with the rest of the word taken whole
    (``\\w*+``: what follows the word is never a word character, so nothing is lost). Searched
    along a line, detect-secrets' ``\\w*`` went back over the word from every position in it: a
    line of 40 kB of ``api_keyapi_key…`` took minutes, and 1 MB of ``DB_PASSWORD=`` a second."""
    out: dict[re.Pattern[str], tuple[int, bool]] = {}
    for rx, group in rules.items():
        lead = rx.pattern.startswith(_KEYWORD_WORDS)
        pattern = _KEYWORD_WORDS + "+" + rx.pattern[len(_KEYWORD_WORDS) :] if lead else rx.pattern
        out[re.compile(pattern, rx.flags)] = (group, lead)
    return out


_LONG_WORD = 256
"""A keyword's word longer than this is searched from its first keyword only (``_at``); in a
shorter one the engine's own search is faster (one call, not one per keyword)."""


def _at(rx: re.Pattern[str], text: str, starts: Iterable[int]) -> Iterator[re.Match[str]]:
    """The matches of ``rx`` at ``starts`` (in order) that begin after the last one found, as
    ``finditer`` would give them: none overlaps another."""
    taken = 0
    for s in starts:
        if s >= taken and (m := rx.match(text, s)) is not None:
            taken = max(m.end(), s + 1)
            yield m


_KEYWORD_AT = _at_keywords(_KEYWORD_RULES)
_KEYWORD_AT_LOWERED = _at_keywords(_KEYWORD_RULES_LOWERED)
_REDACTED = "[REDACTED:"

Gate = tuple[str, ...] | re.Pattern[str]
_GATES: Final[Mapping[str, Gate]] = {
    # A detect-secrets pattern (its exact text: a changed pattern loses its gate, never its
    # matches) → what every match of it holds: one of these substrings (lowercase for a
    # case-insensitive pattern, looked for in the lowercased text), or a match of this pattern,
    # which starts with a literal. Python's engine jumps from one occurrence of a pattern's literal
    # prefix to the next, but tries a pattern that starts with a class, or any pattern with
    # IGNORECASE, at every position: these ran at a few MB/s. A pattern that starts with a
    # literal has no gate: the engine's own search is as fast, and a gate was a second scan
    # (measured on a real Pi session's strings: with them, redaction was no faster at all).
    r"aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]": ("aws",),
    r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+": ("xox",),
    r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+": ("hooks.slack.com",),
    r"(?:r|s)k_live_[0-9a-zA-Z]{24}": ("k_live_",),
    r"[0-9a-z]{32}-us[0-9]{1,2}": ("-us",),
    r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}": re.compile(r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"),
    r"\d{8,10}:[0-9A-Za-z_-]{35}": re.compile(r":[0-9A-Za-z_-]{35}"),
    # context_os's own .pgpass rule, whose every match starts with a colon: a word the screen would
    # find in nearly every text, and report at every colon
    PgpassPasswordDetector.denylist[0].pattern: re.compile(r":(?:\d{1,5}|\*):"),
}
_KEYWORD_GATE = ("key", "pass", "pwd", "secret", "contras")
"""What every match of ``_KEYWORD_TRIGGER`` holds (lowercase)."""

_PEM_END = re.compile(r"(?:[A-Za-z0-9+/=\s\\:,.()]|-(?!----))*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
"""A private-key block's body (base64, headers such as ``Proc-Type: 4,ENCRYPTED``, newlines real
or escaped inside a JSON string) up to its END line; it stops at any other ``-----`` (a run of
markers costs each marker's length, not the whole window)."""
_PEM_MAX = 16_384
_PEM_LINE = re.compile(r"(?:\r?\n|(?:\\r)?\\n)([^\n\\]*)")
_BASE64_LINE = re.compile(r"[A-Za-z0-9+/=]{4,}")
_HEADER_LINE = re.compile(r"[A-Za-z][A-Za-z0-9-]*: ")


_WRAPPED_LINE = re.compile(r"(?:\r?\n|(?:\\r)?\\n)([A-Za-z0-9_-]{4,})(?=$|\r?\n|\\[nr]|[\"'])", re.MULTILINE)
"""The next piece of a key that a terminal (or a JSON string of its output) wrapped: a line of
nothing but key characters."""
_WRAP_WIDTH = 40
"""A key is taken for wrapped only where its line is at least this long (a terminal's width)."""


def _wrapped_end(text: str, start: int, end: int) -> int:
    """Where a key that starts at ``start`` and ends its line at ``end`` ends, if a terminal
    wrapped it: over each next line of nothing but key characters with a digit (``done`` after a
    key stays), no wider than the key's line, as long as the line before it was as wide as the
    first such line (the last piece may be shorter)."""
    lo = _line_at(text, start)[0]
    width = end - lo
    if width < _WRAP_WIDTH:
        return end
    full = None
    for _ in range(64):  # a key is a few hundred characters at most
        m = _WRAPPED_LINE.match(text, end)
        if m is None or len(m.group(1)) > (full or width) or _DIGIT.search(m.group(1)) is None:
            break
        end = m.end()
        if full is None:
            full = len(m.group(1))
        elif len(m.group(1)) < full:
            break
    return end


def _key_block_end(text: str, end: int) -> int | None:
    """Where the private-key block whose marker ends at ``end`` ends: at its END line, or, if the
    text was cut before it, after the last base64 line that follows. None if no key material
    follows (code or docs that only mention the marker)."""
    if text.startswith("-----", end):
        end += 5
    # a key's body is a few kB (an 8192-bit RSA key: 6.4k characters); looking further would make
    # a text of many markers quadratic
    full = _PEM_END.match(text, end, end + _PEM_MAX)
    if full is not None:
        return full.end()
    pos, seen = end, False
    while (m := _PEM_LINE.match(text, pos)) is not None:
        line = m.group(1).strip()
        if _BASE64_LINE.fullmatch(line):
            seen = True
        elif not (_HEADER_LINE.match(line) or (not line and not seen)):
            break
        pos = m.end()
    return pos if seen else None


_VARIABLE_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
"""A value that is the name of an environment variable or a placeholder (``OLLAMA_API_KEY``,
``YOUR_API_KEY``): a config that names where its key is, not the key."""


def _filtered(value: str, line: str, plugin: BasePlugin, assignment: str | None = None) -> bool:
    """detect-secrets' heuristic filters for matches that are judged by context or entropy, and a
    variable's name as the value. ``assignment``: the assignment matched, where one is known;
    whether the value is a call's result is judged there, not on the whole line (a
    ``conn = connect(password="…")`` assigns a call's result, but not to the password; and a
    slice to the line's end for each match would cost quadratic time)."""
    return (
        _REDACTED in value
        or _VARIABLE_NAME.fullmatch(value) is not None
        or heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
        or heuristic.is_not_alphanumeric_string(value)
        or heuristic.is_likely_id_string(value, line, plugin)
        or (assignment is None and heuristic.is_indirect_reference(line))
        # (its pattern needs a call's or an index's bracket)
        or (
            assignment is not None
            and _BRACKET.search(assignment) is not None
            and heuristic.is_indirect_reference(assignment)
        )
    )


_BRACKET = re.compile(r"[\[(]")
_ESCAPES_BEFORE_QUOTE = re.compile(r"\\+(?=[\"'])")


def _unescaped_quotes(line: str) -> tuple[str, list[int] | None]:
    """``line`` without the backslashes before its quotes, and where each character of that is in
    ``line`` (None: nothing was taken out). JSON inside a JSON string has its quotes escaped once
    (``{\\"password\\": \\"…\\"}``), and once more for every string it is inside of (a tool call's
    arguments holding a command that echoes JSON); detect-secrets' keyword rules want quotes."""
    if "\\" not in line:
        return line, None
    parts: list[str] = []
    where: list[int] = []
    pos = 0
    for m in _ESCAPES_BEFORE_QUOTE.finditer(line):
        parts.append(line[pos : m.start()])
        where += range(pos, m.start())
        pos = m.end()
    if not pos:
        return line, None
    parts.append(line[pos:])
    where += range(pos, len(line))
    return "".join(parts), where


def _line_at(text: str, pos: int) -> tuple[int, int]:
    """The line around ``pos``, where an escaped ``\\n`` (text inside a JSON string, such as a
    tool call's arguments) also ends a line."""
    # each look for an escaped newline stops at the real one: a text of many short lines and no
    # escaped newline would be read to its ends at every line (quadratic)
    start = text.rfind("\n", 0, pos) + 1
    escaped = text.rfind("\\n", start, pos)
    start = escaped + 2 if escaped >= 0 else start
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    escaped = text.find("\\n", pos, end)
    return start, end if escaped < 0 else escaped


Span = tuple[int, int, str]
"""(start, end, type name) of one secret in a text."""


class _Text:
    """A text being redacted, and its lowercased form, made once for the rules that use it."""

    def __init__(self, text: str):
        self.text = text
        self._low: str | None = None

    @property
    def low(self) -> str:
        if self._low is None:
            self._low = self.text.lower()
        return self._low

    @property
    def aligned(self) -> bool:
        """Lowercasing kept every position (it may not: "İ" becomes two characters)."""
        return len(self.low) == len(self.text)


def _gate(pattern: re.Pattern[str]) -> Callable[[_Text], bool] | None:
    """The check that a text holds what every match of ``pattern`` holds (``_GATES``), or None
    when the pattern has no gate. Whether its substrings are looked for in the lowercased text
    follows the library's pattern, whichever form of it a rule runs."""
    gate = _GATES.get(pattern.pattern)
    if gate is None:
        return None
    if isinstance(gate, re.Pattern):
        return lambda t: gate.search(t.text) is not None
    if pattern.flags & re.IGNORECASE:
        # "İ" lowercases to two characters, but a gate's ASCII letters are found all the same
        return lambda t: any(w in t.low for w in gate)
    return lambda t: any(w in t.text for w in gate)


@functools.lru_cache(maxsize=4096)
def literal_starts(pattern: str, flags: int = 0) -> tuple[str, ...] | None:
    """Literals one of which every match of ``pattern`` starts with, or None when none can be
    said: a pattern that starts with a class, an optional part, a lookaround or inline flags.
    Alternatives give one literal each: ``(ghp|gho)_`` → ``ghp``, ``gho``. Read from Python's own
    parse of the pattern (``re._parser``, private: where it is gone, every pattern says None and
    its rule runs on every text, as before the screen). Parsed once a process: each ``Redactor``
    (one a session) asks for every rule's patterns, and parsing them took 25-30 ms, which a proxy
    spent before the first byte of every new conversation."""
    if _sre is None:
        return None
    try:
        parsed = _sre.parse(pattern, flags)
    except (re.error, RecursionError):
        return None
    if parsed.state.flags & ~re.UNICODE != flags & ~re.UNICODE:
        return None  # inline flags: "(?i)key" matches what "key" does not
    return _starts(list(parsed))


def _starts(items: list[tuple[Any, Any]]) -> tuple[str, ...] | None:
    """``literal_starts`` of a parsed sequence: its leading literal characters, then what the
    first element after them starts with (a group, alternatives, a repeat of at least one)."""
    literal = ""
    for op, arg in items:
        if op is _sre.LITERAL:
            literal += chr(arg)
            continue
        if op is _sre.BRANCH:
            alternatives = [_starts(list(alt)) for alt in arg[1]]
            then = None if None in alternatives else tuple(w for alt in alternatives if alt for w in alt)
        elif op is _sre.SUBPATTERN and not arg[1] and not arg[2]:  # a group without inline flags
            then = _starts(list(arg[3]))
        elif op is _sre.IN and all(o is _sre.LITERAL for o, _ in arg):  # the parser's "(gho|ghp)"
            then = tuple(chr(c) for _, c in arg)
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT) and arg[0] >= 1:
            then = _starts(list(arg[2]))
        else:
            then = None
        if then is None:
            break
        return tuple(dict.fromkeys(literal + w for w in then))
    return (literal,) if literal else None


class _Rule:
    """One plugin, prepared to report the spans of its secrets in a whole text."""

    def __init__(self, plugin: BasePlugin):
        self.plugin = plugin
        self.name = slug(str(plugin.secret_type))
        self.regexes: list[re.Pattern[str]] = []
        self.confirm = False
        self.accept: Callable[[re.Match[str]], bool] | None = None
        self.widen = not getattr(plugin, "exact", False)  # a user's pattern means what it says
        self.tail: re.Pattern[str] = getattr(plugin, "tail", _TOKEN_TAIL)
        self.wraps: bool = getattr(plugin, "wraps", False)
        self.triggers: tuple[str, ...] = tuple(getattr(plugin, "triggers", ()))
        self.spans: Callable[[_Text], Iterator[Span]]
        if hasattr(plugin, "spans_in"):  # a plugin that finds its own spans
            self.spans = self._own_spans
        elif isinstance(plugin, PrivateKeyDetector):
            self.spans = self._key_blocks
        elif isinstance(plugin, KeywordDetector):
            self.spans = self._keywords
        elif isinstance(plugin, HighEntropyStringsPlugin):
            self.spans = self._entropy
        elif isinstance(plugin, RegexBasedDetector):
            self.spans = self._tokens
            # a plugin's ``accept`` judges each match where it is in the text; else a plugin with
            # its own analyze_string (JWT: the token must decode) confirms each match
            self.accept = getattr(plugin, "accept", None)
            self.confirm = self.accept is None and type(plugin).analyze_string is not RegexBasedDetector.analyze_string
        else:
            self.spans = self._values
        self.lowered: list[re.Pattern[str]] = []
        self.gates: list[Callable[[_Text], bool] | None] = []
        if isinstance(plugin, RegexBasedDetector):
            # line semantics over a whole text: ^ and $ at every line
            self.regexes = [re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist]
            self.gates = [None if getattr(plugin, "exact", False) else _gate(p) for p in plugin.denylist]
            if self.triggers:  # written in lowercase (see above): the same without the flag
                self.lowered = [
                    re.compile(p.pattern, (p.flags & ~re.IGNORECASE) | re.MULTILINE) for p in plugin.denylist
                ]
        self.needs = self._needs()

    def _needs(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(words, lowercase words): every span this rule reports lies in a text that holds one of
        the words, or whose lowercased form holds one of the lowercase words; None when no such
        words are known (the rule runs on every text). What ``_Screen`` looks for in one pass."""
        plugin = self.plugin
        if isinstance(plugin, PrivateKeyDetector):
            return ("PRIVATE KEY", "PuTTY"), ()  # what ``_key_blocks`` requires
        if isinstance(plugin, KeywordDetector):
            return (), _KEYWORD_GATE
        if not isinstance(plugin, RegexBasedDetector) or getattr(plugin, "exact", False):
            return None  # a user's pattern means what it says, whatever it starts with
        if self.triggers:
            return (), self.triggers
        words: list[str] = []
        low: list[str] = []
        for p in plugin.denylist:
            gate = _GATES.get(p.pattern)
            if isinstance(gate, re.Pattern):
                return None
            starts = gate if gate is not None else literal_starts(p.pattern, p.flags)
            if not starts:
                return None
            if p.flags & re.IGNORECASE:
                low += [w.lower() for w in starts]
            else:
                words += starts
        return tuple(words), tuple(low)

    def _tokens(self, t: _Text) -> Iterator[Span]:
        text = t.text
        regexes = self.regexes
        if self.triggers:
            if not any(w in t.low for w in self.triggers):
                return
            if t.aligned:
                text, regexes = t.low, self.lowered
        for rx, gate in zip(regexes, self.gates, strict=True):
            if gate is not None and not gate(t):
                continue
            pos = 0
            # search on from the end of the last (widened) secret: a match inside a token already
            # taken would be widened over the same tail again (``ghp_ghp_…``: quadratic)
            while (m := rx.search(text, pos)) is not None:
                pos = max(m.end(), m.start() + 1)
                if self.accept is not None and not self.accept(m):
                    continue
                if self.confirm and not any(True for _ in self.plugin.analyze_string(m.group(0))):
                    continue
                # the first captured group is the secret, unless it is the prefix that names the
                # kind of token (GitHub's ``(ghp|gho|…)_``): then the whole match is
                g = next((i for i in range(1, rx.groups + 1) if m.group(i)), 0)
                if g and m.start(g) == m.start():
                    g = 0
                start, end = m.span(g)
                if end == m.end() and self.widen:  # the secret ends the match: widen it to its token's end
                    tail = self.tail.match(text, end)
                    end = tail.end() if tail else end
                    pos = max(pos, end)
                if self.wraps:  # a key that ends its line may go on on the next (a terminal wrapped it)
                    end = _wrapped_end(text, start, end)
                    pos = max(pos, end)
                if _REDACTED not in t.text[start:end]:
                    yield start, end, self.name

    def _own_spans(self, t: _Text) -> Iterator[Span]:
        for start, end in self.plugin.spans_in(t.text):  # type: ignore[attr-defined]
            if _REDACTED not in t.text[start:end]:
                yield start, end, self.name

    def _key_blocks(self, t: _Text) -> Iterator[Span]:
        text = t.text
        if "PRIVATE KEY" not in text and "PuTTY" not in text:  # what every marker holds
            return
        for rx in self.regexes:
            for m in rx.finditer(text):
                start = m.start() - 5 if text.startswith("-----", m.start() - 5) else m.start()
                end = _key_block_end(text, m.end())
                if end is not None:
                    yield start, end, self.name

    def _keywords(self, t: _Text) -> Iterator[Span]:
        plugin = self.plugin
        assert isinstance(plugin, KeywordDetector)
        text = t.text
        # the keywords are lowercase words: finding them in the lowercased text is 10x faster
        # than a case-insensitive search
        if not any(w in t.low for w in _KEYWORD_GATE):
            return
        found = _KEYWORD_TRIGGER.finditer(t.low) if t.aligned else _KEYWORD_TRIGGER_ANY_CASE.finditer(text)
        hits, ends = [], []
        for hit in found:
            hits.append(hit.start())
            ends.append(hit.end())
        k = 0
        while k < len(hits):
            lo, line_end = _line_at(text, hits[k])
            first = k
            while k < len(hits) and hits[k] < line_end:
                k += 1
            # every rule takes a quoted value: a line without a quote holds none
            if not any(q in text[lo:line_end] for q in "'\"`"):
                continue
            # quotes escaped inside a JSON string, at any depth, count as quotes
            line, where = _unescaped_quotes(text[lo:line_end])
            if plugin.keyword_exclude is not None and plugin.keyword_exclude.search(line):
                continue
            # where the line's keywords are in ``line`` (a keyword is never a backslash taken out)
            starts = [h - lo if where is None else bisect.bisect_left(where, h - lo) for h in hits[first:k]]
            # a word that holds many keywords (the trigger takes each word whole): tried only at its
            # first keyword, else from each keyword in it over the rest of the word (quadratic)
            long_word = any(ends[i] - hits[i] > _LONG_WORD for i in range(first, k))
            low = line.lower()
            # found in the lowercased line where that keeps every position; judged in the line
            rules, searched = (_KEYWORD_AT_LOWERED, low) if len(low) == len(line) else (_KEYWORD_AT, line)
            for rx, (group, lead) in rules.items():
                for m in _at(rx, searched, starts) if lead and long_word else rx.finditer(searched):
                    value = line[m.start(group) : m.end(group)]
                    if value and not _filtered(value, line, plugin, line[m.start() : m.end()]):
                        start, end = m.span(group)
                        if where is not None:
                            start, end = where[start], where[end - 1] + 1
                        yield lo + start, lo + end, self.name

    def _entropy(self, t: _Text) -> Iterator[Span]:
        plugin = self.plugin
        assert isinstance(plugin, HighEntropyStringsPlugin)
        text = t.text
        for m in plugin.regex.finditer(text):
            value = m.group(2)
            if plugin.calculate_shannon_entropy(value) > plugin.entropy_limit:
                lo, hi = _line_at(text, m.start(2))
                if not _filtered(value, text[lo:hi], plugin):
                    yield m.start(2), m.end(2), self.name

    def _values(self, t: _Text) -> Iterator[Span]:
        """Any other plugin: the values it reports on a line, wherever they are on it."""
        lo = 0
        for line in t.text.split("\n"):
            for value in set(self.plugin.analyze_string(line)):
                if value and _REDACTED not in value:
                    for m in re.finditer(re.escape(value), line):
                        yield lo + m.start(), lo + m.end(), self.name
            lo += len(line) + 1


class _Screen:
    """Which rules can find anything in a text, from one pass over it and one over its lowercased
    form for every rule's words (``_Rule.needs``, Aho-Corasick), rather than a search of the text
    per pattern: most texts hold none of the words, and then only the rules without any run."""

    def __init__(self, rules: Sequence[_Rule]):
        self.count = len(rules)
        self.always = {k for k, r in enumerate(rules) if r.needs is None}
        self.words = _Words({k: r.needs[0] for k, r in enumerate(rules) if r.needs is not None})
        self.low = _Words({k: r.needs[1] for k, r in enumerate(rules) if r.needs is not None})

    def rules(self, t: _Text) -> list[int]:
        """Indices of the rules to run on ``t``, in order."""
        try:
            chosen = self.always | self.words.rules_in(t.text) | (self.low.rules_in(t.low) if self.low else set())
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 form to scan; run them all
            return list(range(self.count))
        return sorted(chosen)


_DFA = ahocorasick_rs.Implementation.DFA


class _Words:
    """An Aho-Corasick automaton over the words of some rules."""

    def __init__(self, needs: Mapping[int, Sequence[str]]):
        owners: dict[str, set[int]] = {}
        for k, words in needs.items():
            for w in words:
                owners.setdefault(w, set()).add(k)
        self.owners = list(owners.values())
        # over UTF-8 bytes: a text's bytes are scanned faster than its characters (3,000
        # characters: 5.4 µs with their encoding, 7.5 µs as text), the same words found
        self.automaton = (
            ahocorasick_rs.BytesAhoCorasick([w.encode("utf-8") for w in owners], implementation=_DFA)
            if owners
            else None
        )

    def __bool__(self) -> bool:
        return self.automaton is not None

    def rules_in(self, text: str) -> set[int]:
        """The rules one of whose words ``text`` holds (UnicodeEncodeError: a lone surrogate)."""
        if self.automaton is None:
            return set()
        # overlapping: every word present is reported, a word inside another one too
        found = {w for w, _, _ in self.automaton.find_matches_as_indexes(text.encode("utf-8"), overlapping=True)}
        return set().union(*(self.owners[w] for w in found))


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<type>]``.

    ``patterns``: regular expressions to redact besides what the detectors find, name → regex
    (or bare regexes, named ``custom-N``; see ``pattern_plugin``). ``plugins``: the
    detect-secrets plugins to run (default
    ``default_plugins(generic=generic)``; ``()``: none). ``generic=False`` leaves the contextual
    detectors out of the defaults."""

    def __init__(
        self,
        patterns: Mapping[str, str | re.Pattern[str]] | Iterable[str] | None = None,
        *,
        generic: bool = True,
        plugins: Sequence[BasePlugin] | None = None,
    ):
        named = (
            dict(patterns)
            if isinstance(patterns, Mapping)
            else {f"custom-{i}": p for i, p in enumerate(patterns or (), 1)}
        )
        chosen = list(default_plugins(generic=generic) if plugins is None else plugins)
        chosen += [pattern_plugin(name, p) for name, p in named.items()]
        self._rules = [_Rule(p) for p in chosen]
        self._screen: _Screen | None = _Screen(self._rules)
        self.names: tuple[str, ...] = tuple(dict.fromkeys(r.name for r in self._rules))

    @classmethod
    def with_extra(cls, extra: Mapping[str, str] | Iterable[str]) -> Redactor:
        """The default detectors plus ``extra`` patterns (same as ``Redactor(extra)``)."""
        return cls(extra)

    @classmethod
    def off(cls) -> Redactor:
        """A redactor that finds nothing."""
        return cls(plugins=())

    @property
    def enabled(self) -> bool:
        return bool(self._rules)

    def find(self, text: str) -> list[Span]:
        """The secrets in ``text``, in order, without overlaps (where two detectors' matches
        overlap, they merge under the name of the one that starts first, the earlier rule on a
        tie)."""
        found: list[tuple[int, int, int, str]] = []
        t = _Text(text)
        rules = self._rules
        chosen = range(len(rules)) if self._screen is None else self._screen.rules(t)
        for k in chosen:
            for s, e, name in rules[k].spans(t):
                # inside a JSON string, a secret never ends in the middle of an escape
                while e > s and text[e - 1] == "\\":
                    e -= 1
                if e > s:
                    found.append((s, k, e, name))
        found.sort()
        merged: list[Span] = []
        for start, _, end, name in found:
            if merged and start < merged[-1][1]:
                if end > merged[-1][1]:
                    merged[-1] = (merged[-1][0], end, merged[-1][2])
                continue
            merged.append((start, end, name))
        return merged

    def redact(self, text: str) -> tuple[str, int]:
        """``text`` with every secret replaced, and how many were replaced."""
        if not text or not self._rules:
            return text, 0
        spans = self.find(text)
        if not spans:
            return text, 0
        out: list[str] = []
        pos = 0
        for start, end, name in spans:
            out += [text[pos:start], f"[REDACTED:{name}]"]
            pos = end
        out.append(text[pos:])
        return "".join(out), len(spans)

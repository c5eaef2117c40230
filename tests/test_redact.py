"""The redactor: every secret shape it must catch, the look-alikes it must leave, the shape of what
it leaves behind, and how it is configured."""

from __future__ import annotations

import base64
import json
import random
import re
import time

import pytest
from detect_secrets.plugins.high_entropy_strings import HexHighEntropyString
from detect_secrets.plugins.keyword import KeywordDetector

from context_os.redact import Redactor, SecretAssignmentDetector, _Text, literal_starts
from tests._reliability import Counts

# built from parts, so that this file is not itself a file of secrets
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789abc_defghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU"
OPENAI_LEGACY = "sk-" + "Ab3dEf6hIj9kLm2nOp5q" + "T3BlbkFJ" + "Rs8tUv1wXy4zAb3dEf6h"
OPENAI_PROJECT = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
ANTHROPIC = "sk-ant-api03-" + "Zy9xWv8uTs7rQp6oNm5lKj4iHg3fEd2c-AbCdEf"
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE_LIVE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_TEST = "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dcXyZ"
GOOGLE = "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo==\n"
    "-----END RSA PRIVATE KEY-----"
)

HUGGING_FACE = "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
NPM = "npm_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d"
VAULT = "hvs." + "CAESIJ3f9a8b7c6d5e4f3a2b1cAbCdEfGhIjKlMn"
DIGITALOCEAN = "dop_v1_" + "3f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a"
AWS_SESSION_TOKEN = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ" + "Dk9xQ2Lm7+Pz/Rt4Vw8=" * 45
"""What ``aws sts assume-role`` prints, about 900 characters."""

CATCHES = [
    # (text, the secret, the name it is redacted as)
    (f"token {GITHUB} here", GITHUB, "github-token"),
    (f"GH_TOKEN={GITHUB_PAT}", GITHUB_PAT, "github-fine-grained-token"),
    (f"old key {OPENAI_LEGACY}.", OPENAI_LEGACY, "openai-token"),
    (f"export OPENAI_API_KEY={OPENAI_PROJECT}", OPENAI_PROJECT, "openai-key"),
    (f"key: {ANTHROPIC}", ANTHROPIC, "anthropic-key"),
    (f"aws {AWS_KEY_ID} here", AWS_KEY_ID, "aws-access-key"),
    (f'aws_secret_access_key = "{AWS_SECRET}"', AWS_SECRET, "aws-access-key"),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET, "secret-assignment"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "secret-assignment"),
    (f"curl -H 'Authorization: Bearer {JWT}' https://api.example.com", JWT, "json-web-token"),
    (f'headers = {{"Authorization": "Bearer {JWT}"}}', JWT, "json-web-token"),
    (
        "Authorization: Bearer 7f9c2ba4e88f827d616045507605853e",
        "7f9c2ba4e88f827d616045507605853e",
        "authorization-header",
    ),
    ("ok, the password is hunter2-Secret.", "hunter2-Secret", "password-statement"),
    ("My password was Tr0ub4dor&3 yesterday", "Tr0ub4dor&3", "password-statement"),
    ('api_key = "q8Zr2LmX9vT4pK7wN3bY6hJ1"', "q8Zr2LmX9vT4pK7wN3bY6hJ1", "secret-keyword"),
    ('{"apiKey": "q8Zr2LmX9vT4pK7wN3bY6hJ1", "model": "x"}', "q8Zr2LmX9vT4pK7wN3bY6hJ1", "secret-keyword"),
    ("DB_PASSWORD=Tr0ub4dor&3", "Tr0ub4dor&3", "secret-assignment"),
    ("POSTGRES_PASSWORD: s3cr3t-pg-pass", "s3cr3t-pg-pass", "secret-assignment"),
    (f"SLACK_BOT={SLACK}", SLACK, "slack-token"),
    (f"stripe {STRIPE_LIVE}", STRIPE_LIVE, "stripe-access-key"),
    (f"stripe {STRIPE_TEST}", STRIPE_TEST, "stripe-test-key"),
    (f"maps?key={GOOGLE}&q=1", GOOGLE, "google-api-key"),
    (f"login with {HUGGING_FACE} now", HUGGING_FACE, "hugging-face-token"),
    (f"NPM_TOKEN {NPM} set", NPM, "npm-access-token"),
    (f"vault token lookup {VAULT}", VAULT, "vault-token"),
    (f"doctl auth init -t {DIGITALOCEAN}", DIGITALOCEAN, "digitalocean-token"),
    ("postgres://admin:s3cretPass@db.example.com:5432/app", "s3cretPass", "basic-auth-credentials"),
    # a quoted value assigned to a token name: an OAuth token response, AWS STS credentials, a
    # JSON string inside JSON (detect-secrets' keyword list has no "token")
    ('{"access_token": "ya29.a0AfH6SMBx7Qk2LmN3pQ"}', "ya29.a0AfH6SMBx7Qk2LmN3pQ", "secret-assignment"),
    ('"SessionToken": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ"',
     "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ", "secret-assignment"),
    ('{"r": "{\\"refresh_token\\": \\"1//0gAbCdEfGhIjKl9\\"}"}', "1//0gAbCdEfGhIjKl9", "secret-assignment"),
    ("auth_token = 'tk_4f9a8b7c6d5e'", "tk_4f9a8b7c6d5e", "secret-assignment"),
    (f'"SessionToken": "{AWS_SESSION_TOKEN}",', AWS_SESSION_TOKEN, "secret-assignment"),  # 900+ characters
    # a URL keeps its host when the user name ends in a secret word
    (f"git clone https://x-access-token:{GITHUB}@github.com/o/r.git", GITHUB, "github-token"),
    ("git remote add origin https://deploy-token:Ab12Cd34Ef56@gitlab.example.com/g/p.git", "Ab12Cd34Ef56",
     "basic-auth-credentials"),
    ("DB_PASSWORD=p@ssw0rd-Long1", "p@ssw0rd-Long1", "secret-assignment"),
    # an @ before a host ends the value: what comes before it is still the secret
    ("REDIS_PASSWORD=hunter2abc@cache.example.com:6379", "hunter2abc", "secret-assignment"),
    # a password given to a command on its command line
    ("mysql -h db -u root -pS3cretPass1 app", "S3cretPass1", "command-line-password"),
    ("mysqldump -uroot -phunter2 app > dump.sql", "hunter2", "command-line-password"),
    ("docker exec db mysql -u app -p'my pass 1' -e 'select 1'", "my pass 1", "command-line-password"),
    ("mysql --password=hunter2 -u root", "hunter2", "command-line-password"),
    ('docker login --password "s3cret!" ghcr.io', "s3cret!", "command-line-password"),
    ("curl -u admin:hunter2 https://api.example.com/v1", "hunter2", "command-line-password"),
    ("curl -s --user 'deploy:S3cret Pass' https://ci.example.com/job", "S3cret Pass", "command-line-password"),
    ("curl -uadmin:hunter2 https://x.example.com", "hunter2", "command-line-password"),
    ('{"command": "curl -u \\"admin:hunter2\\" https://x.example.com"}', "hunter2", "command-line-password"),
    ("sshpass -p 'S3cretPass1' ssh root@10.0.0.5", "S3cretPass1", "command-line-password"),
    ("sshpass -phunter2 scp a.txt host:", "hunter2", "command-line-password"),
    ("docker login -u bob -p S3cretPass1 registry.example.com", "S3cretPass1", "command-line-password"),
    ("podman login -u bob -pS3cretPass1 quay.io", "S3cretPass1", "command-line-password"),
    ("mysqladmin -u root -pS3cretPass1 status", "S3cretPass1", "command-line-password"),
    ("az login -u bob@example.com -p 'S3cret Pass1'", "S3cret Pass1", "command-line-password"),
    ("redis-cli -h cache -a S3cretPass1 ping", "S3cretPass1", "command-line-password"),
    ("sqlcmd -S db -U sa -P 'S3cretPass1' -Q 'select 1'", "S3cretPass1", "command-line-password"),
    ("kubectl --token abc123def456ghi789 get pods", "abc123def456ghi789", "command-line-password"),
    ("mycli deploy --api-key 9f8e7d6c5b4a3f2e1d0c", "9f8e7d6c5b4a3f2e1d0c", "command-line-password"),
    # a password as a positional argument, or any word after --password
    ("htpasswd -b .htpasswd admin hunter2", "hunter2", "command-line-password"),
    ("htpasswd -bc /etc/nginx/.htpasswd admin S3cret", "S3cret", "command-line-password"),
    ("htpasswd -B -C 12 -b users.db bob 'my pass'", "my pass", "command-line-password"),
    ("htpasswd -nb admin hunter", "hunter", "command-line-password"),
    ("mysqladmin -u root password newpass", "newpass", "command-line-password"),
    ("mysqladmin -u root -p password 'new pass'", "new pass", "command-line-password"),
    ("mytool --password hunter", "hunter", "command-line-password"),
    # a password that holds the word, with a digit or symbol, is a password all the same
    ("mysql -u root --password Password1! app", "Password1!", "command-line-password"),
    ("mytool --password 'MyPassword2024'", "MyPassword2024", "command-line-password"),
    ("mysql -uroot -p'secret' app", "secret", "command-line-password"),
    # a 'your' in a password is no placeholder: only a value that starts with it (your-api-key)
    ("psql --password=Secr3t_your -h db", "Secr3t_your", "command-line-password"),
    ("DB_PASSWORD=Secr3t_your", "Secr3t_your", "secret-assignment"),
    # ~/.pgpass: hostname:port:database:username:password
    ("db.example.com:5432:app:alice:hunter2", "hunter2", "pgpass-password"),
    ("localhost:*:*:postgres:S3cret!\n", "S3cret!", "pgpass-password"),
    ("*:*:*:*:pa\\:ss", "pa\\:ss", "pgpass-password"),
    ('echo "localhost:5432:mydb:bob:s3cret" > ~/.pgpass', "s3cret", "pgpass-password"),
    ('{"content": "# dev\\nlocalhost:5432:db:u:letmein\\n"}', "letmein", "pgpass-password"),
    # credentials files: ~/.netrc, a Docker config.json (base64 of user:password), an .npmrc
    ("machine api.github.com login octocat password S3cretPass1", "S3cretPass1", "netrc-password"),
    ("machine example.com\n  login alice\n  password hunter2\n", "hunter2", "netrc-password"),
    ("machine api.example.com password S3cretPass1", "S3cretPass1", "netrc-password"),
    ('{"content": "machine api.example.com\\npassword S3cretPass1\\n"}', "S3cretPass1", "netrc-password"),
    ("machine example.com login alice port 21 password hunter2", "hunter2", "netrc-password"),
    ("default login anonymous password guest1", "guest1", "netrc-password"),
    ('{"content": "machine example.com\\n  login alice\\n  password hunter2\\n"}', "hunter2", "netrc-password"),
    ('{"auths": {"https://index.docker.io/v1/": {"auth": "YWxpY2U6aHVudGVyMg=="}}}', "YWxpY2U6aHVudGVyMg==",
     "base64-credentials"),
    ('\t\t\\"auth\\": \\"YWxpY2U6aHVudGVyMg==\\"', "YWxpY2U6aHVudGVyMg==", "base64-credentials"),
    ("_auth = YWxpY2U6aHVudGVyMg==", "YWxpY2U6aHVudGVyMg==", "base64-credentials"),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "base64-credentials"),  # user:pass: no digit
    # a weak password assigned on a line of its own: config, .env, ~/.my.cnf, YAML, env output
    ("password: hunter2\n", "hunter2", "password-assignment"),
    ("PASSWORD=correcthorse", "correcthorse", "password-assignment"),
    ("DB_PASSWORD=secret", "secret", "password-assignment"),
    ("  db_password = letmein  # dev only\n", "letmein", "password-assignment"),
    ("export PGPASSWORD=hunter2", "hunter2", "password-assignment"),
    ("MYSQL_PWD=root", "root", "password-assignment"),
    ("[client]\nuser=root\npassword=letmein\n", "letmein", "password-assignment"),
    ("services:\n  db:\n    environment:\n      - POSTGRES_PASSWORD=hunter\n", "hunter", "password-assignment"),
    ('"Env": ["POSTGRES_PASSWORD=secret", "PATH=/usr/bin"]', "secret", "password-assignment"),
    ('{"content": "[client]\\nuser=root\\npassword=letmein\\n"}', "letmein", "password-assignment"),
    # or for one command
    ("PGPASSWORD=hunter psql -U app -h db", "hunter", "password-assignment"),
    ("PGHOST=db PGPASSWORD=letmein pg_dump app > app.sql", "letmein", "password-assignment"),
    ("cd app && env MYSQL_PWD=root mysql -u app", "root", "password-assignment"),
    ('{"command": "PGPASSWORD=hunter psql -U app"}', "hunter", "password-assignment"),
    # a passphrase of several words, unquoted, to the end of its line (YAML, INI)
    ("password: correct horse battery staple\n", "correct horse battery staple", "password-assignment"),
    ("db:\n  password: correct horse battery staple  # prod\n", "correct horse battery staple", "password-assignment"),
    ("[db]\npassword = correct horse battery staple\n", "correct horse battery staple", "password-assignment"),
    # a token of letters only after its option, a password in capitals
    ("mytool --token abcdef", "abcdef", "command-line-password"),
    ("mytool --api-key=abcdef deploy", "abcdef", "command-line-password"),
    # a password that holds "key" or "token" is still one (only a token's may not name a key)
    ("mysql --password monkey app", "monkey", "command-line-password"),
    # a bare PASS assigned with "=" holds a password even of letters only (not a test's "PASS:")
    ("PASS=letmein ./deploy.sh", "letmein", "password-assignment"),
    ("export PASS=letmein", "letmein", "password-assignment"),
    ("pass=hunter&user=bob", "hunter", "password-assignment"),
    ("app --password=keyboardcat", "keyboardcat", "command-line-password"),
    ("mysqladmin -u root password NEWPASS", "NEWPASS", "command-line-password"),
    ("sshpass -p HUNTER ssh host", "HUNTER", "command-line-password"),
    # in a query string or a form body: the value ends where the next parameter starts
    ("password=hunter2&user=bob", "hunter2", "password-assignment"),
    ("curl -d 'user=bob&password=hunter&next=/' https://x/login", "hunter", "password-assignment"),
    ("GET https://x/login?user=bob&password=hunter2&next=/ HTTP/1.1", "hunter2", "password-assignment"),
    ("see https://x/login?password=letmein", "letmein", "password-assignment"),
    ("password=a&b2c&user=bob", "a&b2c", "password-assignment"),  # an & that starts no parameter
    # the last of a string's assignments: a libpq connection string
    ('conn = psycopg2.connect("dbname=app user=app password=hunter2")', "hunter2", "password-assignment"),
    ('DSN="host=db user=app password=hunter"', "hunter", "password-assignment"),
    # a URL's password with an empty user, as Redis has it
    ("REDIS_URL=redis://:hunter2@cache:6379/0", "hunter2", "basic-auth-credentials"),
    # in a connection string (ADO.NET, ODBC): the value ends at its ";"
    ("Server=db;Database=app;User Id=sa;Password=hunter2;", "hunter2", "password-assignment"),
    ('conn = "Server=db;Uid=sa;Pwd=letmein;Encrypt=yes"', "letmein", "password-assignment"),
    ("Password=hunter;Server=db", "hunter", "password-assignment"),
    # a password passed to a call whose result is assigned: the call is not the password
    ('conn = connect(password="hunter2")', "hunter2", "secret-keyword"),
    ("conn = psycopg2.connect(host='db', user='app', password='letmein')", "letmein", "secret-keyword"),
    ("cnx = mysql.connector.connect(user='root', password='s3cret', host='db')", "s3cret", "secret-keyword"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "secret", "name"), CATCHES, ids=[c[2] + "-" + str(i) for i, c in enumerate(CATCHES)])
def test_required_secret_shapes_are_redacted_and_only_the_value_goes(
    text: str, secret: str, name: str, reliability: Counts
) -> None:
    out, n = Redactor().redact(text)
    reliability.add("attack: secret shape (redactor)", attempts=1, missed=int(secret in out))
    assert n == 1 and secret not in out
    assert out == text.replace(secret, f"[REDACTED:{name}]")


def test_a_jwt_goes_with_its_signature() -> None:
    out, _ = Redactor().redact(f"Authorization: Bearer {JWT}")
    assert out == "Authorization: Bearer [REDACTED:json-web-token]"
    assert JWT.rsplit(".", 1)[1] not in out


@pytest.mark.parametrize(
    "text",
    [
        f"key:\n{PEM}\nafter",  # a file
        "key:\n" + json.dumps(PEM)[1:-1] + "\nafter",  # inside a JSON string: escaped newlines
        "key:\n" + PEM.replace("\n", " ") + "\nafter",  # one line, as in an environment variable
    ],
)
def test_private_key_blocks_are_removed_whole(text: str, reliability: Counts) -> None:
    out, n = Redactor().redact(text)
    missed = any(line in out for line in PEM.splitlines()[1:-1])  # a line of the key's body
    reliability.add("attack: secret shape (redactor)", attempts=1, missed=int(missed))
    assert n == 1 and out == "key:\n[REDACTED:private-key]\nafter"


WRAPPED_KEY = "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3Ab4Cd5Ef6Gh7Ij8Kl9Mn0Op1Qr2St3Uv4Wx5Yz6Ab7Cd8Ef9" * 2


@pytest.mark.parametrize(
    ("before", "newline", "after"),
    [("", "\n", "\n$ next"), ("export OPENAI_API_KEY=", "\n", ""), ('{"out": "', "\\n", '\\ndone"}')],
)
def test_a_key_a_terminal_wrapped_goes_with_all_its_lines(before: str, newline: str, after: str) -> None:
    """A key wider than the terminal comes out on several lines (in a tool's output, or its JSON
    with escaped newlines): every line of it goes, and nothing after it."""
    first = 64 - len(before)
    pieces = [WRAPPED_KEY[:first]] + [WRAPPED_KEY[i : i + 64] for i in range(first, len(WRAPPED_KEY), 64)]
    text = before + newline.join(pieces) + after
    out, n = Redactor().redact(text)
    assert (out, n) == (before + "[REDACTED:openai-key]" + after, 1)


def test_a_line_after_a_key_that_fills_no_terminal_line_stays() -> None:
    """Only a key that ends a line as wide as a terminal's is read on: a short one, and a word
    without a digit after a long one, stay apart."""
    short = "sk-proj-Ab1Cd2Ef3Gh4Ij5Kl6Mn7"
    assert Redactor().redact(f"{short}\nfoo1234bar") == ("[REDACTED:openai-key]\nfoo1234bar", 1)
    assert Redactor().redact(f"{WRAPPED_KEY[:64]}\ndone") == ("[REDACTED:openai-key]\ndone", 1)


def test_a_private_key_cut_off_before_its_end_line_is_removed_to_where_it_stops() -> None:
    cut = PEM.rsplit("\n", 2)[0]
    out, n = Redactor().redact(f"$ cat id_rsa | head -3\n{cut}")
    assert n == 1 and out == "$ cat id_rsa | head -3\n[REDACTED:private-key]"


def test_a_private_key_cut_off_inside_a_json_string_is_removed_to_where_it_stops() -> None:
    """A tool's output as JSON, its newlines escaped, cut before the END line (``head``, a
    truncated output): the key's lines go, what follows them stays."""
    cut = PEM.rsplit("\n", 2)[0].replace("\n", "\\n")
    out, n = Redactor().redact(f'{{"output": "{cut}\\n[output truncated]"}}')
    assert (out, n) == ('{"output": "[REDACTED:private-key]\\n[output truncated]"}', 1)


@pytest.mark.parametrize(
    "text",
    [
        f"Your access key is {AWS_KEY_ID} and the secret is {AWS_SECRET}.",
        f"Access key ID,Secret access key\n{AWS_KEY_ID},{AWS_SECRET}\n",  # the console's CSV
        f'{{"output": "AccessKeyId: {AWS_KEY_ID}\\nSecretAccessKey: {AWS_SECRET}\\n"}}',
        f"aws_access_key_id {AWS_KEY_ID}\naws_secret_access_key {AWS_SECRET}",
        # before the id, or far after it
        f"Secret access key,Access key ID\n{AWS_SECRET},{AWS_KEY_ID}\n",
        f"the secret is {AWS_SECRET} and its id {AWS_KEY_ID}",
        f"AccessKeyId: {AWS_KEY_ID}\nNote: " + "lorem ipsum " * 30 + f"\nSecretAccessKey: {AWS_SECRET}\n",
    ],
)
def test_a_bare_aws_secret_key_goes_with_a_key_id_near_it(text: str, reliability: Counts) -> None:
    out, n = Redactor().redact(text)
    reliability.add("attack: secret shape (redactor)", attempts=1, missed=int(AWS_SECRET in out))
    assert n == 2 and out == text.replace(AWS_KEY_ID, "[REDACTED:aws-access-key]").replace(
        AWS_SECRET, "[REDACTED:aws-secret-access-key]"
    )


@pytest.mark.parametrize(
    "text",
    [
        f"{AWS_KEY_ID} at commit 2e5810b9f2c4d1e0a3b5c7d9e1f3a5b7c9d1e3f5",  # a git hash: no capitals
        f"{AWS_KEY_ID}, see https://example.com/"
        + "aB3dE6fG9hJ2kL5mN8pQ1rS4tU7vW0xY3zA6bC9d"
        + "Ef/x",  # 40 of a longer run
        f"{AWS_SECRET}\n" + "lorem ipsum " * 90 + AWS_KEY_ID,  # 1,000 characters away
    ],
)
def test_near_an_aws_key_id_only_a_secret_key_shaped_word_goes(text: str) -> None:
    assert Redactor().redact(text) == (text.replace(AWS_KEY_ID, "[REDACTED:aws-access-key]"), 1)


LOOK_ALIKES = [
    "b3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",  # a content hash
    'hash = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"',
    "2e5810b9f2c4d1e0a3b5c7d9e1f3a5b7c9d1e3f5 Workspace: a root with a NUL byte",  # git log
    '{"sha": "2e5810b9f2c4d1e0a3b5c7d9e1f3a5b7c9d1e3f5", "parents": []}',
    "session ffae836b-9420-4060-ac13-7745215f90ff",  # a UUID
    '"integrity": "sha512-MH7LB20kNpGLUpPTe2OG5XvL/KhX8HUO9XyBaFjgFk6TLS4Xjt0VPIuMKywe7POKKPslX+QxSlVok9e+8kG5Nw=="',
    '{"id": "toolu_012yuiPP1VAfh196GXaAmT8D", "type": "function"}',  # a tool-call id
    "const apiKey = await getApiKeyForModel(this.model);",
    "password = input('password: ')",
    'password = getpass("Password: ")',
    'secret = get_secret("db", "main")',
    "api_key = os.environ['OPENAI_API_KEY']",
    "password: string; token?: Token",
    "token_count = 123456789012345678",
    "def get_secret_name(self): return self.secret_name_for_display",
    "max_tokens=4096",
    "the task is done; see sk-learn docs",
    "Authorization: Bearer YOUR_API_KEY",
    "Authorization: Bearer ${TOKEN}",
    "the secret is patience, and the password is long",
    'if line.startswith("-----BEGIN RSA PRIVATE KEY-----"):',  # a parser mentioning the marker
    "Use offset=3 to continue. apiKey?: string",
    "from utils import hf_hub_download_with_retries_and_cache",  # an identifier, not a token
    "echo $npm_config_registry_url_for_the_scoped_packages_here",  # npm's own variables
    "see hvs.example in the docs",
    'token = "placeholder"',  # no digit
    '{"token_type": "Bearer", "expires_in": 3599}',
    '{"apiKey": "OLLAMA_API_KEY", "api": "openai"}',  # the name of a variable, not its value
    'api_key = "YOUR_API_KEY"',  # a placeholder
    "mysql -u root -p app",  # asks for the password
    "mysql -u root -P3306 -h db app",  # the port
    'mysql -u root -p"$MYSQL_PASSWORD" app',
    "  --password TEXT      the password to use",  # a command's --help
    "  --password string    Password",
    "  --password <password>",
    "--password=PASSWORD_FILE",
    "docker login --password-stdin ghcr.io",
    'curl -u "$USER:$TOKEN" https://x',
    "curl -u admin: https://x",  # asks for the password
    "curl --user-agent 'Mozilla/5.0 x:y' https://x",
    "sshpass -p $SSHPASS ssh host",
    "login to the box with ssh -p 2222 root@host",  # a port
    "gcc -o app app.c $(mysql_config --cflags --libs) -pthread",  # compiler flags, no client
    "apt install mysql-server libmysqlclient-dev -y -proot",  # not a client
    "pytest tests -k login -p no:cacheprovider",  # a line that says "login", not a login command
    "open the login page, then mkdir -p src/app/pages",
    "gh auth login -p ssh -h github.com",  # gh's -p is the git protocol
    "docker login -u bob --password-stdin ghcr.io",
    "  --token string     Bearer token for authentication to the API server",  # kubectl --help
    "  --api-key <key>                API key (defaults to env vars)",
    "llm --max-tokens 4096 -m gpt",
    "gh api --token --paginate repos/o/r",  # the next option, not a value
    "mytool --api-key --log-level=debug",
    "redis-cli -a $REDIS_PASSWORD ping",
    "the machine asks for a login and password on boot",
    "The default password is admin, change it.",  # prose: no netrc entry
    "Change the default password of the router",
    "a machine learning password manager",
    "machine example.com login USERNAME password PASSWORD",  # a tutorial's placeholders
    "mysql -u root -p… app",
    '{"auth": "oauth2", "scopes": ["repo"]}',
    '{"auth": "bearer"}',
    '"auth": "dGhpcyBpcyBub3QgYSBwYWly"',  # base64 of text without a ':'
    "htpasswd -c .htpasswd admin",  # asks for the password
    "htpasswd -n admin",
    "mysqladmin -u root -p password $NEW_PASSWORD",
    "use the --password flag to give it",
    "qpdf --password=mypassword --decrypt in.pdf out.pdf",  # an example
    "--password is required when --user is given",
    "  --password string   Password for the registry",
    "10:12:30:45:00",  # a time, not a .pgpass line
    "src/app.py:10:4:import",  # rg --vimgrep
    "root:x:0:0:root:/root:/bin/bash",
    "see host:5432:db:user:pw in the docs",
    "hostname:port:database:username:password",
    "localhost:5432:db:user:PASSWORD",
    # values that say they are examples
    "mycli deploy --api-key=your-api-key",
    "--token=your-token-here1",
    "--password=xxxxxxxx",
    "mytool --token example-token-1",
    "API_KEY=your-api-key-1",
    "DB_PASSWORD=changeme123",
    "SECRET_KEY=change_me_1234",
    # what code, a schema or a template assigns to a password, and prose
    "the default password is admin",
    "password = password",
    "    password=password,",
    "password: ${DB_PASSWORD}",
    'password = os.environ["PASSWORD"]',
    "password: str",
    "password: String!",
    "password: SecretStr",
    "password = None",
    "password = self.password",
    "password = db_password",
    "password: *default_password",  # a YAML alias
    "password: ****",
    "password: xxxxxx",
    "DB_PASSWORD=changeme",
    "DB_PASSWORD=your_password",
    "password=$DB_PASSWORD",
    "password: hunter2 is what the docs use",  # not the whole line
    "PGPASSWORD=$PGPASS psql -U app",
    "call(password=secret arg)",
    "PWD=/home/alice/project",  # the working directory
    "OLDPWD=/tmp",
    "bypass: true",
    # an option named in prose or a --help, and placeholders in capitals
    "use --token to set it",
    "  --api-key KEY     the key",
    "--access-token ACCESS_TOKEN",
    "mysqladmin -u root password NEWPASSWORD",
    "sshpass -p PASSWORD ssh host",
    "mytool --token mytoken",
    # a --help's columns and an error about the option: no token of letters only
    "  --token    GitHub token",
    "  --api-key  API key for the service",
    "Error: --token required",
    "error: --api-key missing",
    "hint: --token expired, run login again",
    # a word after "pass" (test output, a form), nsswitch.conf's sources for its passwd database
    "pass: skip",
    "x = 1;password=getPassword();",
    "if (ok) {n=1;passwd=getpw(user);}",  # a call after a ";" in code, not a connection string
    "a=1;password=hashed(pw, salt);",
    "cd src;PWD=/home/alice/src",
    "Pass: Alice Bob",
    "PASS: src/app.test.js",
    "PASS: test-login-flow",
    "Password: enter it below",
    "password: str | None",
    "Pass: Alice",
    "PASS: Alice",
    "passwd: compat",
    "passwd:         files systemd",
    "passwd:         files",
    "https://x/login?password=changeme&user=bob",
    '"passwd:gecos",',
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert Redactor().redact(text) == (text, 0)


def test_base64_image_data_is_left_alone() -> None:
    blob = base64.b64encode(random.Random(7).randbytes(300_000)).decode()
    assert Redactor().redact(blob) == (blob, 0)


def test_redacted_json_stays_json_with_its_keys() -> None:
    args = {
        "path": "deploy.py",
        "content": f'API_KEY = "q8Zr2LmX9vT4pK7wN3bY6hJ1"\nTOKEN = "{GITHUB}"\nclient = make(API_KEY)\n',
        "command": f"curl -H 'Authorization: Bearer {JWT}' -d password=Tr0ub4dor3x https://x",
    }
    raw = json.dumps(args)
    out, n = Redactor().redact(raw)
    parsed = json.loads(out)
    assert n == 4 and parsed.keys() == args.keys() and parsed["path"] == "deploy.py"
    for secret in ("q8Zr2LmX9vT4pK7wN3bY6hJ1", GITHUB, JWT, "Tr0ub4dor3x"):
        assert secret not in out
    assert parsed["content"].endswith("client = make(API_KEY)\n")


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize(
    ("inner", "name"),
    [
        ({"password": "Tr0ub4dor3x", "user": "app"}, "secret-keyword"),
        ({"api_key": "q8Zr2LmX9vT4pK7wN3bY6hJ1"}, "secret-keyword"),
        ({"refresh_token": "1//0gAbCdEfGhIjKl9"}, "secret-assignment"),
    ],
)
def test_a_secret_in_json_inside_json_strings_goes_at_any_depth(
    inner: dict[str, str], name: str, depth: int, reliability: Counts
) -> None:
    """A tool call's arguments are a JSON string; a command in them may echo JSON, whose quotes are
    then escaped once per level of string around it."""
    secret = next(iter(inner.values()))
    text = json.dumps(inner)
    for _ in range(depth):
        text = json.dumps({"arguments": text})
    out, n = Redactor().redact(text)
    reliability.add("attack: secret shape (redactor)", attempts=1, missed=int(secret in out))
    assert n == 1 and out == text.replace(secret, f"[REDACTED:{name}]")
    for _ in range(depth):
        out = json.loads(out)["arguments"]
    assert json.loads(out) == {**inner, next(iter(inner)): f"[REDACTED:{name}]"}


LONG_VALUE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7/" * 120
"""6,000 characters of base64 (a private key's DER, as a kubeconfig or a CI variable holds it)."""


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (f"SSH_KEY_TOKEN={LONG_VALUE[:600]}\nnext=1", LONG_VALUE[:600]),  # unquoted: over the 512 looked at
        (f"export DEPLOY_KEY={LONG_VALUE}", LONG_VALUE),
        (f'{{"id_token": "{LONG_VALUE[:5000]}", "x": 1}}', LONG_VALUE[:5000]),  # quoted: over the 4,096
        (f'{{"access_token": "{LONG_VALUE}"}}', LONG_VALUE),
    ],
    ids=["unquoted-600", "unquoted-6000", "quoted-5000", "quoted-6000"],
)
def test_a_value_longer_than_the_rules_window_goes_whole(text: str, value: str, reliability: Counts) -> None:
    """The rules look at 512 characters of an unquoted value and 4,096 of a quoted one (so that a
    megabyte of ``key=key=…`` costs linear time); a longer value is still a secret, taken whole."""
    out, n = Redactor().redact(text)
    reliability.add("attack: secret shape (redactor)", attempts=1, missed=int(value[:300] in out))
    assert n == 1 and out == text.replace(value, "[REDACTED:secret-assignment]")


def test_redacting_twice_changes_nothing_more() -> None:
    text = "\n".join(c[0] for c in CATCHES) + f"\n{PEM}\n"
    once, n = Redactor().redact(text)
    assert n == len(CATCHES) + 1
    assert Redactor().redact(once) == (once, 0)


def test_patterns_add_to_the_detectors_and_the_detectors_can_be_chosen() -> None:
    text = f"see TICKET-42 and {OPENAI_PROJECT}"
    assert Redactor({"ticket": r"TICKET-\d+"}).redact(text) == (
        "see [REDACTED:ticket] and [REDACTED:openai-key]",
        2,
    )
    only = Redactor({"ticket": r"TICKET-\d+"}, plugins=())
    assert only.redact(text) == (f"see [REDACTED:ticket] and {OPENAI_PROJECT}", 1)
    assert Redactor.with_extra([r"INTERNAL-\w+"]).redact("id INTERNAL-abc") == ("id [REDACTED:custom-1]", 1)
    assert Redactor([r"token=(\w+)"], plugins=()).redact("?token=abc&x=1") == ("?token=[REDACTED:custom-1]&x=1", 1)
    # any detect-secrets plugin, e.g. one left out of the defaults
    hexes = Redactor(plugins=[HexHighEntropyString()])
    assert hexes.redact('h = "af1349b9f5f9a1a6a0404dea36dcc949"')[1] == 1


def test_redaction_can_be_off_or_without_the_contextual_detectors() -> None:
    off = Redactor.off()
    assert not off.enabled and off.redact(GITHUB) == (GITHUB, 0)
    shapes_only = Redactor(generic=False)
    assert "secret-keyword" not in shapes_only.names and "github-token" in shapes_only.names
    assert shapes_only.redact("the password is hunter2-Secret") == ("the password is hunter2-Secret", 0)
    assert shapes_only.redact(GITHUB) == ("[REDACTED:github-token]", 1)


HOSTILE_RUNS = [
    "sk-", "eyJ", "ghp_", "github_pat_", "AKIA", "xoxb-", "AIza", "hf_", "sk_test_", "glpat-", "npm_", "pypi-",
    "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----\n", "password is a1", "api_key=",
    "key=a1", "Authorization: Bearer ", "https://u:p@", "//r/:_authToken=", "'password': '", 'secret = "',
    '"token": "a1', "token='a1", "--password=a1", "--password '", "mysql -p", "curl -u a:", "machine a password ",
    '"auth": "', "_auth=YWxp", AWS_KEY_ID + " ", "login ", "--token ", "redis-cli -a", "\npwd",
    "\npassword=", AWS_SECRET + " " + AWS_KEY_ID + " ", "a=b ", "PGPASSWORD=ab ",
    # one word of keywords: detect-secrets' keyword rules went back over it from every position
    "api_key", "password", "DB_PASSWORD=", "password: ab cd ",
]  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize("run", HOSTILE_RUNS)
def test_a_hostile_megabyte_costs_linear_time(run: str, reliability: Counts) -> None:
    """A tool output can be anything a web page or a file holds: one megabyte of a detector's
    prefix, repeated, must not stall a session. The library's own OpenAI, JWT and npm patterns and
    the widening of token matches were quadratic (300 kB of ``sk-`` took 149 s), and so was finding
    the line of each keyword in a megabyte of short lines (``\\npwd``: minutes); a linear pass
    over 1 MB takes a few seconds at most, so the timeout only catches a relapse, it measures nothing."""
    text = run * (1_000_000 // len(run))
    started = time.monotonic()
    out, _ = Redactor().redact(text)
    reliability.timed("attack: hostile megabyte (redactor)", started)
    reliability.add("attack: hostile megabyte (redactor)", attempts=1, characters=len(text))
    assert len(out) > 0


@pytest.mark.parametrize("run", ["key=", "api_key=", "DB_PASSWORD=", "secret:"])
def test_an_assigned_value_is_read_once_whatever_it_holds(run: str) -> None:
    """``secret-assignment`` takes a name's whole unquoted value in one match and judges it
    after, so the search goes on after the value: a megabyte of ``key=key=…`` is one match. Its
    pattern used to fail on such a value (no digit) and the engine tried again at the next name
    inside it, re-reading up to 511 characters at each (1 MB: 3-4 s)."""
    text = run * (1_000_000 // len(run))
    unquoted = SecretAssignmentDetector.denylist[0]
    assert len(list(unquoted.finditer(text))) == 1
    assert Redactor().redact(text) == (text, 0)


def test_the_keyword_rules_find_the_same_in_any_case() -> None:
    """detect-secrets' keyword rules run without their case-insensitive flag on the lowercased
    line (10x faster): the same spans, and values judged in their own case (an upper-case
    variable name stays)."""
    redactor = Redactor(plugins=[KeywordDetector()])
    for text, secret in [
        ('PASSWORD = "q8Zr2LmX9vT4pK7wN3bY6hJ1"', "q8Zr2LmX9vT4pK7wN3bY6hJ1"),
        ('{"ApiKey": "q8Zr2LmX9vT4pK7wN3bY6hJ1"}', "q8Zr2LmX9vT4pK7wN3bY6hJ1"),
        ("İ secret = 'q8Zr2LmX9vT4pK7wN3bY6hJ1'", "q8Zr2LmX9vT4pK7wN3bY6hJ1"),  # "İ" lowercases to two
    ]:
        assert redactor.redact(text) == (text.replace(secret, "[REDACTED:secret-keyword]"), 1)
    assert redactor.redact('API_KEY = "OLLAMA_API_KEY"')[1] == 0


# one sample of every detector whose pattern has a gate (redact._GATES), built from parts
GATED = [
    "db.example.com:5432:app:alice:" + "hunter2",
    "AKIA" + "IOSFODNN7EXAMPLE",
    'aws_key = "' + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY" + '"',
    "AWS.Token='" + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY" + "'",
    SLACK,
    "https://hooks.slack.com/services/" + "T0000/B0000/XXXXXXXXXXXXXXXX",
    "HTTPS://HOOKS.SLACK.COM/services/" + "T0000/B0000/XXXXXXXXXXXXXXXX",
    STRIPE_LIVE,
    "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "AC" + "a" * 32,
    "SK" + "0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef" + "-us12",
    GITHUB,
    "glpat-" + "x" * 20,
    "M" + "a" * 23 + "." + "b" * 6 + "." + "c" * 27,
    "123456789:" + "A" * 35,
    'password = "' + "q8Zr2LmX9vT4pK7wN3bY6hJ1" + '"',
    'Contraseña = "' + "q8Zr2LmX9vT4pK7wN3bY6hJ1" + '"',
]


def mixed_texts(shapes: list[str], words: list[str], *, seed: int) -> list[str]:
    """``shapes`` alone, in text, cased otherwise, and 2,000 texts of a few of them among ``words``,
    each whole and cut in two at random."""
    rng = random.Random(seed)
    texts = [*shapes, *(f"see {s} here" for s in shapes), *(s.lower() for s in shapes), *(s.upper() for s in shapes)]
    for _ in range(2_000):
        parts = rng.choices(shapes, k=rng.randint(0, 3)) + rng.choices(words, k=rng.randint(0, 12))
        rng.shuffle(parts)
        text = rng.choice(["", " ", "\n"]).join(parts)
        cut = rng.randint(0, len(text))
        texts += [text, text[:cut], text[cut:]]
    return texts


def test_gates_change_nothing_that_is_found() -> None:
    """A gate (redact._GATES) only skips a pattern that cannot match: with and without them, the
    same spans, on every gated shape alone, in text, and cut or joined at random."""
    gated = Redactor()
    plain = Redactor()
    for rule in plain._rules:
        rule.gates = [None] * len(rule.gates)
    assert sum(g is not None for r in gated._rules for g in r.gates) == 8  # every gate found its pattern
    words = ["the", "key", "İstanbul", ".", ":", "AC", "SK", "-us", "gh", "gl", "xox", "aws", "\n", "\\n", '"']
    for text in mixed_texts(GATED, words, seed=5):
        assert gated.find(text) == plain.find(text), text
    assert all(gated.find(s) for s in GATED)


@pytest.mark.parametrize(
    ("pattern", "starts"),
    [
        ("sk-ant-(?<![\\w-]sk-ant-)[A-Za-z0-9_-]{20,}", ("sk-ant-",)),
        ("(ghp|gho|ghu)_[A-Za-z0-9_]{36}", ("ghp", "gho", "ghu")),
        ("(?:A3T[A-Z0-9]|ABIA|AKIA)[0-9A-Z]{16}", ("A3T", "ABIA", "AKIA")),
        ("SG\\.[a-zA-Z0-9_-]{22}", ("SG.",)),
        ("abc?d", ("ab",)),  # the "c" may be absent, and what follows it is not a start
        ("ab+c", ("ab",)),  # one "b" at least
        ("ab{2}", ("ab",)),
        ("foo|bar", ("foo", "bar")),
        ("foo|[a-z]bar", None),
        ("[MNO][a-z]{23}", ("M", "N", "O")),  # a class of single characters: one word each
        ("[a-z]{23}x", None),
        ("\\d{8}:", None),
        ("(?i)key", None),
        ("(?=x)xy", None),
        ("(?P<k>key)=", ("key",)),
        ("(?i:key)x", None),  # a group with flags of its own
        ("(ab)?c", None),
        ("(ab|[cd])e", ("ab", "c", "d")),
        ("a|", None),
        ("a\\|b", ("a|b",)),
        ("[|]x|y", ("|x", "y")),
        ("(ab", None),
    ],
)
def test_literal_starts_are_what_every_match_starts_with(pattern: str, starts: tuple[str, ...] | None) -> None:
    assert literal_starts(pattern) == starts


def test_literal_starts_read_the_patterns_flags() -> None:
    assert literal_starts("(?i)key") is None  # inline: "KEY" matches, and the caller cannot know
    assert literal_starts("(?i)key", re.IGNORECASE) == ("key",)  # the caller looks in lowercase
    assert literal_starts("a b", re.VERBOSE) == ("ab",)


def test_the_screen_changes_nothing_that_is_found() -> None:
    """The screen (one Aho-Corasick pass for the words every rule's matches hold) only skips a
    rule that cannot match: with and without it, the same spans, on every shape the redactor
    catches, alone, in text, cased otherwise, and cut or joined at random."""
    screened = Redactor()
    plain = Redactor()
    plain._screen = None
    # every default rule but the three whose gates are patterns knows its words
    assert [r.name for r in screened._rules if r.needs is None] == [
        "discord-bot-token",
        "telegram-bot-token",
        "pgpass-password",
    ]
    shapes = [c[0] for c in CATCHES] + GATED + [PEM, JWT, "npm //registry.npmjs.org/:_authToken=" + "npm_" + "x" * 36]
    words = ["the", "is", " is ", "key", "KEY", "İstanbul", "ſ", ".", ":", "://", "sk-", "eyJ", "\n", "\\n", '"']
    words.append("\ud800")  # a lone surrogate: no UTF-8 form for the screen to scan
    for text in mixed_texts(shapes, words, seed=11):
        assert screened.find(text) == plain.find(text), text
    assert all(screened.find(s) for s in shapes)
    assert screened.find("nothing secret in here at all") == []


def test_the_screen_looks_for_words_not_letters() -> None:
    """A rule whose pattern starts with a class (``[Bb]asic``) or a bare ``--`` would be screened by
    a letter or two and run on nearly every text: ordinary prose runs only the rules the screen
    cannot judge."""
    redactor = Redactor()
    chosen = redactor._screen.rules(_Text("A bold plan -- nothing hidden here, by Bob (see B) --verbose"))
    assert [redactor._rules[k].name for k in chosen] == ["discord-bot-token", "telegram-bot-token", "pgpass-password"]

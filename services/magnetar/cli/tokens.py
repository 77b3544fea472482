"""``magnetar tokens``: make keys and tokens, as ``pulsar tokens`` does.

Subcommands and options are Pulsar's (TokensCliUtils): ``create-secret-key [-a HS256] [-o FILE]
[-b]`` writes raw key bytes (base64 with ``-b``); ``create-key-pair [-a RS256|ES256]
--output-private-key F --output-public-key F`` writes DER keys; ``create -s ROLE [-e 1d]
(-sk KEY | -pk KEY)`` prints a token; ``validate (-sk KEY | -pk KEY) TOKEN`` prints its claims
(as JSON: Pulsar prints a Java map) or fails with exit code 1; ``show TOKEN`` prints the header,
``---`` and the claims, unverified. Keys are URLs (``file:///path``, ``data:;base64,...``), a
path, or base64 (broker/auth/keys.py). The token of ``show``/``validate`` comes from the argument,
``-i`` (stdin), ``-f FILE`` or the ``TOKEN`` environment variable.

One difference: without ``-a``, a private or public key's algorithm follows the key (RS256 for
an RSA key, ES256/ES384/ES512 for an EC key by its curve), where Pulsar assumes RS256.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import TokenError, TokenVerifier, create_token, parse_relative_time, show

_CURVE_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


def _algorithm_of(key: Any, given: str | None) -> str:
    """``-a`` when given, else what the decoded private or public key is for."""
    if given:
        return given
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return _CURVE_ALGORITHMS.get(key.curve.name, "ES256")
    raise keys.InvalidKey(f"unsupported key type {type(key).__name__}; pass -a")


def _token_input(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    if args.stdin:
        return sys.stdin.readline().strip()
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    raise SystemExit("Token needs to be passed as an argument or through -i/--stdin, -f/--token-file or TOKEN")


def _one_key(args: argparse.Namespace, other: str) -> None:
    given = [k for k in ("secret_key", other) if getattr(args, k)]
    flag = "--private-key" if other == "private_key" else "--public-key"
    if len(given) != 1:
        raise SystemExit(f"Exactly one of --secret-key and {flag} needs to be passed")


def cmd_create_secret_key(args: argparse.Namespace) -> int:
    key = keys.new_secret_key(args.signature_algorithm)
    data = base64.b64encode(key) if args.base64 else key
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def cmd_create_key_pair(args: argparse.Namespace) -> int:
    private, public = keys.new_key_pair(args.signature_algorithm)
    Path(args.output_private_key).write_bytes(private)
    Path(args.output_public_key).write_bytes(public)
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    _one_key(args, "private_key")
    expires_in = parse_relative_time(args.expiry_time) if args.expiry_time else None
    if args.secret_key:
        algorithm = args.signature_algorithm or "HS256"
        key = keys.read_key(args.secret_key)
    else:
        key = keys.read_key(args.private_key)
        algorithm = _algorithm_of(keys.private_key(key), args.signature_algorithm)
    print(create_token(algorithm, key, args.subject, expires_in))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    _one_key(args, "public_key")
    token = _token_input(args)
    if args.secret_key:
        verifier = TokenVerifier(args.signature_algorithm or "HS256", keys.read_key(args.secret_key))
    else:
        key = keys.read_key(args.public_key)
        verifier = TokenVerifier(_algorithm_of(keys.public_key(key), args.signature_algorithm), key)
    try:
        verified = verifier.verify(token)
    except TokenError as exc:
        print(f"magnetar tokens validate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(verified.claims, sort_keys=True))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        header, claims = show(_token_input(args))
    except TokenError as exc:
        print(f"magnetar tokens show: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(header))
    print("---")
    print(json.dumps(claims))
    return 0


def _token_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", nargs="?", default=None, help="the token (or -i, -f, $TOKEN)")
    parser.add_argument("-i", "--stdin", action="store_true", help="read the token from standard input")
    parser.add_argument("-f", "--token-file", default=None, help="read the token from a file")


def run(args: argparse.Namespace) -> int:
    """Run one subcommand; a bad key or argument is one line on stderr and exit code 1."""
    try:
        result: int = args.tokens_func(args)
    except (keys.InvalidKey, ValueError, OSError) as exc:
        print(f"magnetar tokens {args.tokens_command}: {exc}", file=sys.stderr)
        return 1
    return result


def add_tokens_command(sub: Any) -> None:
    """``magnetar tokens ...`` on the ``magnetar`` parser's subcommands."""
    tk = sub.add_parser("tokens", help="create keys and JWT tokens for authentication (as pulsar tokens)")
    cmds = tk.add_subparsers(dest="tokens_command", required=True)

    sk = cmds.add_parser("create-secret-key", help="a new secret key (HS256)")
    sk.add_argument("-a", "--signature-algorithm", default="HS256", choices=keys.HMAC_ALGORITHMS)
    sk.add_argument("-o", "--output", default=None, help="write the key to this file instead of stdout")
    sk.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")
    sk.set_defaults(tokens_func=cmd_create_secret_key)

    kp = cmds.add_parser("create-key-pair", help="a new private/public key pair (RS256, ES256)")
    kp.add_argument("-a", "--signature-algorithm", default="RS256", choices=keys.RSA_ALGORITHMS + tuple(keys.EC_CURVES))
    kp.add_argument("--output-private-key", required=True)
    kp.add_argument("--output-public-key", required=True)
    kp.set_defaults(tokens_func=cmd_create_key_pair)

    cr = cmds.add_parser("create", help="a new token signed with a secret or private key")
    cr.add_argument("-a", "--signature-algorithm", default=None, help="default: HS256, or the private key's")
    cr.add_argument("-s", "--subject", required=True, help="the role ('sub' claim) of the token")
    cr.add_argument("-e", "--expiry-time", default=None, help="relative expiry (1h, 3d, 10y); default: never")
    cr.add_argument("-sk", "--secret-key", default=None, help="file:///path, data:;base64,..., a path or base64")
    cr.add_argument("-pk", "--private-key", default=None, help="file:///path, data:;base64,..., a path or base64")
    cr.set_defaults(tokens_func=cmd_create)

    va = cmds.add_parser("validate", help="verify a token against a secret or public key; print its claims")
    va.add_argument("-a", "--signature-algorithm", default=None, help="default: HS256, or the public key's")
    va.add_argument("-sk", "--secret-key", default=None)
    va.add_argument("-pk", "--public-key", default=None)
    _token_source(va)
    va.set_defaults(tokens_func=cmd_validate)

    sh = cmds.add_parser("show", help="print a token's header and claims (not verified)")
    _token_source(sh)
    sh.set_defaults(tokens_func=cmd_show)

    tk.set_defaults(func=run)

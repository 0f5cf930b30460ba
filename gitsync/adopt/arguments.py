"""The adoption commands' own arguments, for cli's parser: light (argparse only), read at every start."""

from __future__ import annotations

import argparse
from pathlib import Path

LAYOUTS = ("per-kind", "per-item", "per-service")
FORMATS = ("adc", "apisix-yaml", "openapi")
SHELLS = ("bash", "zsh", "fish")


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def _node(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", required=True, type=Path,
                        help="a new (or empty) directory for the config repo")
    parser.add_argument("--layout", choices=LAYOUTS, default="per-kind",
                        help="one file per kind (default; keeps the gateway's order), one per item, or one "
                             "per service with its routes")


def _secrets_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--secrets-out", metavar="PATH", type=Path, default=None,
                        help="where secret values go: a new directory of one 0600 file per value (use it as "
                             "--secrets-dir), or with --age-recipient a SOPS file; never inside --out")
    parser.add_argument("--age-recipient", metavar="AGE1…", action="append", default=None,
                        help="encrypt the secret values for this age recipient into the SOPS file "
                             "--secrets-out (repeatable)")


def export(parser: argparse.ArgumentParser) -> None:
    _out(parser)
    _secrets_out(parser)
    parser.add_argument("--strip-defaults", action="store_true",
                        help="leave out fields equal to their schema default (the first sync then rewrites "
                             "those items)")
    parser.add_argument("--split-by", metavar="LABEL", default=None,
                        help="one repo per value of this label (--out DIR/VALUE), the kinds without it in "
                             "--split-rest's, and DIR/sources.toml, the [[sources]] that compose them again")
    parser.add_argument("--split-rest", metavar="NAME", default="platform",
                        help="with --split-by: the repo of the kinds whose items carry no such label "
                             "(default %(default)s)")


def import_(parser: argparse.ArgumentParser) -> None:
    """With --gateway (and --admin-key-file, from the settings' flags) import adc follows the live
    gateway; a gateway of the settings file or the environment alone is not read."""
    parser.add_argument("format", choices=FORMATS,
                        help="adc: ADC declarative files; apisix-yaml: a file-driven apisix.yaml; openapi: "
                             "OpenAPI specs (3.x, Swagger 2.0), as a repo's openapi: section renders them")
    parser.add_argument("files", metavar="FILE", nargs="+", type=Path, help="the files to import")
    _out(parser)
    _secrets_out(parser)
    parser.add_argument("--label-selector", metavar="KEY=VALUE", action="append", type=_label, default=[],
                        help="adc: the --label-selector given to adc sync (ADC stamps these labels)")
    parser.add_argument("--adc-version", metavar="VERSION", default=None,
                        help="adc: the ADC release whose adc sync wrote the gateway (0.20.0 … 0.28.0 as X.Y "
                             "or X.Y.Z, or main for a build after 0.28.0); default: the latest release, "
                             "0.28.0, or with --gateway what the gateway shows")
    parser.add_argument("--managed-by-label", action=argparse.BooleanOptionalAction, default=None,
                        help="adc: stamp (or leave out) the managed-by: adc label ADC after 0.28.0 puts on "
                             "services, routes, stream routes, consumers and SSLs (default: as the ADC "
                             "release, or the gateway, says)")
    parser.add_argument("--no-lint", action="store_true",
                        help="adc: the files were synced with adc sync --no-lint (no defaults filled in)")
    parser.add_argument("--server-variable", metavar="NAME=VALUE", action="append", type=_label, default=[],
                        help="openapi: the value of the specs' server variable NAME (default: its default)")
    parser.add_argument("--upstream-node", metavar="HOST:PORT", action="append", type=_node, default=[],
                        help="openapi: the upstream's nodes, instead of the hosts of the specs' servers")
    parser.add_argument("--request-validation", action="store_true",
                        help="openapi: validate requests (request-validation) from each operation's header "
                             "parameters and JSON body")


def init(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", type=Path, help="a new (or empty) directory")
    parser.add_argument("--wheel", metavar="FILE", type=Path, default=None,
                        help="the apisix-gitsync wheel your agents run: CI installs it by its sha256 "
                             "(default: the wheel this gitsync was installed from)")
    parser.add_argument("--wheel-url", metavar="URL", default=None,
                        help="where CI downloads that wheel (default: the package index)")
    parser.add_argument("--pin-only", action="store_true",
                        help="only rewrite ci/gitsync-requirements.txt and ci/gitsync-libraries.txt in DIR "
                             "(move an existing repo's CI to another gitsync version)")
    parser.add_argument("--source", dest="only_source", metavar="NAME", default=None,
                        help="the repo of source NAME of the agent's [[sources]] (--config: the agent's "
                             "settings file): its CI validates it alone, with ci/gitsync-sources.toml")
    parser.add_argument("--sources-only", action="store_true",
                        help="with --source: only rewrite ci/gitsync-sources.toml in DIR (after the agent's "
                             "[[sources]] changed)")


def schema(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", required=True, type=Path,
                        help="directory for the JSON Schema files (created; files replaced)")


def completion(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS,
                        help="bash: `gitsync completion bash > /etc/bash_completion.d/gitsync`; zsh: as "
                             "_gitsync in a directory of $fpath; fish: in ~/.config/fish/completions/")

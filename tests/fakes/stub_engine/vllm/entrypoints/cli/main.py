# -*- coding: utf-8 -*-
"""Test stand-in for `vllm serve --config FILE` on a node group's member other than the head
(`headless: true`): it prints the line vLLM's headless launcher prints, then holds the process like
the real workers do, answering no HTTP, until it is stopped. Anything else is refused."""
import sys
import time

import yaml


def main():
    args = sys.argv[1:]
    if not args or args[0] != "serve" or "--config" not in args:
        print("stub vllm CLI: only `serve --config FILE` is stood in for, got %s" % args, file=sys.stderr)
        return 2
    with open(args[args.index("--config") + 1]) as handle:
        config = yaml.safe_load(handle)
    if not config.get("headless"):
        print("stub vllm CLI: only a headless member is stood in for (the head runs the api_server module)",
              file=sys.stderr)
        return 2
    print("INFO [serve.py:224] Launching vLLM (v0.0.0-stub) headless multiproc executor, with head node address "
          "%s:%s for torch.distributed process group." % (config.get("master-addr"), config.get("master-port")),
          flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())

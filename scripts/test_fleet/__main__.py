# -*- coding: utf-8 -*-
"""Command line of the test fleet (run through scripts/test-fleet.sh). Exit status: 0 done,
1 a failure (printed as one message, no traceback), 2 bad usage, 3 `check-clean` found leftovers."""
import argparse
import json
import sys

from test_fleet import faults
from test_fleet.common import DEFAULT_FLEET, DEFAULT_SUBNET, LOGIN_USER, FleetError
from test_fleet.fleet import DEFAULT_GROUP, Fleet, default_host_names


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="test-fleet.sh", description=__doc__)
    parser.add_argument("--name", default=DEFAULT_FLEET,
                        help="fleet name, prefix of its links and namespaces (default %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring the fleet up (tearing down a leftover one first)")
    up.add_argument("--hosts", type=int, default=3, help="number of hosts, named h1..hN (default %(default)s)")
    up.add_argument("--host-names", help="comma-separated host names instead of h1..hN")
    up.add_argument("--subnet", help="first three octets of the /24 (default: %s for the fleet %s, else derived "
                                     "from the name)" % (DEFAULT_SUBNET, DEFAULT_FLEET))
    up.add_argument("--data-dir", help="directory shared read-only into every host at /srv/hy3-test/data")
    up.add_argument("--venv", help="engine virtualenv whose packages the hosts get (default: <repo>/.venv; "
                                   "'' for none)")
    up.add_argument("--group", default=DEFAULT_GROUP, help="inventory group (default %(default)s)")
    sub.add_parser("down", help="tear the fleet down and check nothing is left")
    sub.add_parser("check-clean", help="list anything of the fleet left on the machine; exit 3 if any")
    sub.add_parser("status", help="hosts, addresses, inventory, memory per host (JSON)")
    sub.add_parser("inventory", help="print the inventory path")
    restart = sub.add_parser("restart", help="power a host off and boot it again (its files kept)")
    restart.add_argument("host")
    run = sub.add_parser("exec", help="run a command as root inside a host")
    run.add_argument("host")
    run.add_argument("argv", nargs=argparse.REMAINDER)
    inject = sub.add_parser("inject", help="inject a fault: " + "; ".join(
        "%s: %s" % (k, f.help) for k, f in faults.FAULTS.items()))
    inject.add_argument("fault", choices=list(faults.FAULTS))
    inject.add_argument("host")
    inject.add_argument("arg", nargs="?", help="the port, for take-port")
    heal = sub.add_parser("heal", help="undo one fault, or all of them")
    heal.add_argument("host")
    heal.add_argument("fault", nargs="?", choices=list(faults.FAULTS))
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "up":
            names = args.host_names.split(",") if args.host_names else default_host_names(args.hosts)
            fleet = Fleet(args.name, names, args.subnet, args.data_dir, venv=args.venv, group=args.group).up()
            print(fleet.inventory_path)
        elif args.command == "check-clean":
            left = Fleet(args.name).leftovers()
            for line in left:
                print(line)
            return 3 if left else 0
        elif args.command == "down":
            try:
                fleet = Fleet.load(args.name)
            except FleetError:
                fleet = Fleet(args.name)           # no record: still sweep by name
            fleet.down()
        else:
            fleet = Fleet.load(args.name)
            if args.command == "status":
                print(json.dumps({"name": fleet.name, "inventory": fleet.inventory_path, "user": LOGIN_USER,
                                  "key": fleet.key, "hosts": {h.name: h.address for h in fleet.hosts},
                                  "timings": fleet.timings, "memory_mib": fleet.memory_mib()}, indent=1))
            elif args.command == "inventory":
                print(fleet.inventory_path)
            elif args.command == "restart":
                fleet.restart(args.host)
            elif args.command == "exec":
                argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
                proc = fleet.exec_in(args.host, argv, check=False)
                sys.stdout.write(proc.stdout)
                sys.stderr.write(proc.stderr)
                return proc.returncode
            elif args.command == "inject":
                faults.inject(fleet, args.fault, args.host, args.arg)
            elif args.command == "heal":
                faults.heal(fleet, args.host, args.fault)
    except FleetError as exc:
        sys.stderr.write("test-fleet: error: %s\n" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

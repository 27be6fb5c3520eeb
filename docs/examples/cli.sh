# The CLI beside an application's journal. Run from the repository root:
#   sh docs/examples/cli.sh ./state
set -e
J="$1"
python docs/examples/cli_order.py "$J"                 # leaves orders/o-1 waiting
python -m actors --journal "$J" list
python -m actors --journal "$J" show orders/o-1 --limit 3
python -m actors --journal "$J" send orders/o-1 approved '{"by": "ann"}'
python docs/examples/cli_order.py "$J"                 # the order takes the message
python -m actors --journal "$J" list --status completed --json

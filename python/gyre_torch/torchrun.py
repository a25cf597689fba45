"""``python3 -m gyre_torch.torchrun ARGS``: torchrun, with the fix Debian's torch 1.13
needs under Python 3.11 (gyre_torch/_launch_fix.py). Same arguments as torchrun."""
from gyre_torch._launch_fix import fix

if __name__ == "__main__":
    fix()
    from torch.distributed.run import main

    main()

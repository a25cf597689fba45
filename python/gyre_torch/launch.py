"""``python3 -m gyre_torch.launch ARGS``: ``python -m torch.distributed.launch`` (which
passes ``--local_rank`` to the script), with the fix Debian's torch 1.13 needs under
Python 3.11 (gyre_torch/_launch_fix.py). Same arguments."""
from gyre_torch._launch_fix import fix

if __name__ == "__main__":
    fix()
    from torch.distributed.launch import main

    main()

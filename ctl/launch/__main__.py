"""`python -m ctl.launch`: the local launcher (ctl.launch.launcher)."""

from ctl.launch import launcher

if __name__ == "__main__":
  launcher.main()

"""The QEMU driver (driver.py): guests with a kernel of their own, for what a container host cannot show."""

"""The engine as a whole under faults and over time: leaks and the fault storm."""

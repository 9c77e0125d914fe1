"""What people read and look at: tables (terminal, markdown) and the PNG plot."""

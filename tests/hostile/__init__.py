"""Generated hostile inputs for every file reader, file writer and numeric option of every command (issue 22)."""

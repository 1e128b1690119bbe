"""The go/no-go report: grouped, ranked findings of one run against its baseline."""

"""The blocking facade's machinery: the loop thread, how a blocking call waits, listener threads."""

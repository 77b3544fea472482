"""What ties brokers together: namespace bundle ownership, isolation, metadata-store resources."""

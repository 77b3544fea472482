"""What ties brokers together: bundle ownership, isolation, metadata-store resources, and addressing
(a broker's advertised listeners and URLs)."""

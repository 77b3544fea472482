"""The schema registry of topics and the admission of producers' and consumers' schemas."""

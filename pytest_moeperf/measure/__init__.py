"""What is measured and how: workloads, request shapes, samples and measurements, summary
statistics."""

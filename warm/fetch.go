package warm

// The ordered parallel Range reader, the reused buffers and the metering
// reader that were here are layers/blob's OrderedReader, Buffers and
// Meter: warm and weights read blobs through that one package.

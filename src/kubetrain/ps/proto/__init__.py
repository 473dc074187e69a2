"""The PS protocol: `kubetrain_ps.proto` and its generated gRPC/protobuf modules (`generate` remakes them)."""

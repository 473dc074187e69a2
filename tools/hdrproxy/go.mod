module kubetrain.local/hdrproxy

go 1.26.6

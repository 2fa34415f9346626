# For those who build with Docker: the same image as scripts/image.sh (which needs no
# daemon): a static binary on an empty base, non-root, with a CA bundle.
#   docker build -t snigate:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /snigate ./cmd/snigate \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /snigate /snigate
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
LABEL org.opencontainers.image.title=snigate org.opencontainers.image.source=https://github.com/snigate/snigate
ENTRYPOINT ["/snigate"]

module lockbroker.example/lockbroker

go 1.19

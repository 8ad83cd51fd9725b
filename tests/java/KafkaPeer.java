// kipconsumer's Java peer: the Apache Kafka Java client (kafka-clients 4.x) driven from the command
// line, so that tests can check kipconsumer against the client whose API and semantics it models.
//
// Built by `./dev.sh setup` (javac into .build/java-peer/) or on demand by tests/java_peer.py; runs
// on the kafka-clients jar and its compression/slf4j jars. Every command prints JSON lines on
// stdout (one object per line, flushed at once); diagnostics go to stderr.
//
//   defaults                         the Java client's producer and consumer config defaults
//   partition-for N                  stdin: one key per line (hex bytes, or "null"); stdout: the
//                                    partition Java's default partitioner gives it among N
//   produce BOOTSTRAP TOPIC [opts]   send records, print each record's metadata after the last ack
//       --count N                    records k-<i> / v-<i> (default 100), or
//       --keys-from-stdin            one record per stdin line (hex key or "null"), value v-<i>
//       --compression C              none|gzip|snappy|lz4|zstd
//       --timestamp-base MS          record i gets timestamp MS + i (default: the producer's clock)
//       --headers                    headers h-index=<i> (UTF-8), h-null=null, h-bin=[0,255,i%256]
//       --transactional-id ID        one transaction per --txn-size records (default 10), committed
//       --txn-pattern P              or aborted per P's letters, cycled (c=commit, a=abort; default c);
//                                    each transaction's records are flushed (in the log) before it ends
//       --partition P                send to partition P instead of the partitioner's choice
//   consume BOOTSTRAP TOPIC [opts]   assign every partition from the beginning, read up to the end
//       --isolation L                offsets seen at start (read_committed: the last stable offsets),
//                                    print each record, then {"event":"end","count":N}
//       --timeout S                  give up after S seconds (default 30): exit code 3
//   group BOOTSTRAP TOPIC GROUP [opts] consume as a group member; after processing each poll's
//       --protocol classic|consumer  records (printing one "record" line each) commit them
//       --assignor A|default         synchronously and print a "committed" line; print "assigned",
//       --session-timeout-ms MS      "revoked", "lost"; stop on stdin EOF or SIGTERM: commit,
//       --member NAME                print {"event":"closed"} and close (leaving the group)
//       --max-poll-records N
//   lag BOOTSTRAP TOPIC [--isolation L] [--max-poll-records N]  assign partition 0 from offset 0,
//                                    poll once with records (at most N), then print
//                                    {"position","lag"}: currentLag once known (within 10 s)
//   poll-latency BOOTSTRAP TOPIC N   (bench/java_bench.py) time polls of up to 500 buffered records:
//                                    10 rounds of a 1 s pause then K timed poll(1 s) calls (K from N as
//                                    bench/workers.py's *-latency clients), after an untimed warm-up read
//                                    of --warmup-records (default 20000) by another consumer and one
//                                    untimed poll (Java fetches only inside poll()); prints
//                                    (--rounds R and --pause-ms P change the 10 and the 1 s, for tests)
//                                    buffered_p50_us/_p99_us/_max_us, first_p50_us/first_max_us
//   fairness BOOTSTRAP TOPIC COUNTS  COUNTS = records per partition (a,b,c...): assign all from 0, sleep
//       --max-poll-records N         --settle S, poll until all are read; prints {"timeline": one list of
//       --settle S                   per-partition counts per poll that returned records}
//   poll-gap BOOTSTRAP TOPIC GROUP TOTAL --gap-ms G [--max-poll-interval-ms M] [--max-poll-records N]
//       [--session-timeout-ms S]
//                                    subscribe, poll until records, commit, stop polling for G ms, then
//                                    poll (committing) until TOTAL records; prints the listener's events
//                                    (t from the gap's start), duplicates, seconds to records after the gap
//   stall BOOTSTRAP TOPIC --stall S  assign all from 0, poll (500) until records, print "stall_start",
//                                    sleep S s without polling, print "stall_end" (RSS sampled outside)
//   consume-bench BOOTSTRAP TOPIC N  read N records (every partition from the beginning), then
//                                    {"records","seconds","cpu_seconds"} (process CPU, all threads,
//                                    from the first poll on: JVM start-up excluded) of the last of
//                                    --passes P reads (default 2: the first warms the JIT up)
//   produce-bench BOOTSTRAP TOPIC N [--value-size B] [--acks A] [--passes P]  send N keyed records
//                                    and flush, P times (the topic gets P x N), the last one reported
//   share-bench BOOTSTRAP TOPIC N --groups G1,G2,..  one KafkaShareConsumer per group in turn (each
//                                    group set to share.auto.offset.reset=earliest beforehand), implicit
//                                    acknowledgement, reads N records; {"records","seconds","cpu_seconds"}
//                                    of the last group's pass, from its first non-empty poll to the end
//                                    of close() (the earlier passes warm the JIT up)
//
// Written for kipconsumer; uses only the public kafka-clients API, plus
// BuiltInPartitioner.partitionForKey (the producer's own function for keyed records).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaPeer {
    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage("no command");
        }
        String cmd = args[0];
        Opts o = new Opts(args);
        switch (cmd) {
            case "defaults" -> defaults();
            case "partition-for" -> partitionFor(Integer.parseInt(o.pos(1, "N")));
            case "produce" -> produce(o);
            case "consume" -> System.exit(consume(o));
            case "group" -> group(o);
            case "lag" -> lag(o);
            case "poll-latency" -> pollLatency(o);
            case "fairness" -> fairness(o);
            case "poll-gap" -> pollGap(o);
            case "stall" -> stall(o);
            case "consume-bench" -> consumeBench(o);
            case "produce-bench" -> produceBench(o);
            case "share-bench" -> shareBench(o);
            default -> usage("unknown command " + cmd);
        }
        OUT.flush();
    }

    private static void usage(String why) {
        System.err.println("KafkaPeer: " + why + " (commands: defaults, partition-for, produce, consume, group)");
        System.exit(2);
    }

    // -- options ---------------------------------------------------------------------------------
    private static final class Opts {
        final List<String> positional = new ArrayList<>();
        final Map<String, String> named = new HashMap<>();

        Opts(String[] args) {
            for (int i = 1; i < args.length; i++) {
                String a = args[i];
                if (a.startsWith("--")) {
                    boolean flag = i + 1 >= args.length || args[i + 1].startsWith("--");
                    named.put(a.substring(2), flag ? "true" : args[++i]);
                } else {
                    positional.add(a);
                }
            }
        }

        String pos(int index, String name) {
            if (index - 1 >= positional.size()) {
                usage("missing argument " + name);
            }
            return positional.get(index - 1);
        }

        String get(String name, String dflt) {
            return named.getOrDefault(name, dflt);
        }

        boolean has(String name) {
            return named.containsKey(name);
        }
    }

    // -- JSON output -----------------------------------------------------------------------------
    private static String hex(byte[] b) {
        if (b == null) {
            return "null";
        }
        StringBuilder sb = new StringBuilder(b.length * 2 + 2).append('"');
        for (byte x : b) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.append('"').toString();
    }

    private static byte[] unhex(String s) {
        s = s.trim();
        if (s.equals("null")) {
            return null;
        }
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    private static String str(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                default -> {
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }

    private static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        }
        if (v instanceof Class<?> c) {
            return str(c.getName());
        }
        if (v instanceof List<?> l) {
            StringBuilder sb = new StringBuilder("[");
            for (int i = 0; i < l.size(); i++) {
                sb.append(i == 0 ? "" : ",").append(json(l.get(i)));
            }
            return sb.append(']').toString();
        }
        if (v instanceof org.apache.kafka.common.config.types.Password) {
            return "\"(password)\"";
        }
        return str(v.toString());
    }

    private static synchronized void emit(String line) {
        OUT.println(line);
        OUT.flush();
    }

    private static String recordJson(String event, ConsumerRecord<byte[], byte[]> r, String member) {
        StringBuilder h = new StringBuilder("[");
        boolean first = true;
        for (Header x : r.headers()) {
            h.append(first ? "" : ",").append('[').append(str(x.key())).append(',').append(hex(x.value())).append(']');
            first = false;
        }
        h.append(']');
        return "{\"event\":" + str(event) + (member == null ? "" : ",\"member\":" + str(member))
                + ",\"topic\":" + str(r.topic()) + ",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                + ",\"key\":" + hex(r.key()) + ",\"value\":" + hex(r.value()) + ",\"timestamp\":" + r.timestamp()
                + ",\"timestamp_type\":" + str(r.timestampType().name) + ",\"headers\":" + h + "}";
    }

    // -- defaults --------------------------------------------------------------------------------
    private static void defaults() {
        emit("{\"producer\":" + defaultsOf(ProducerConfig.configDef().defaultValues()) + ",\"consumer\":"
                + defaultsOf(ConsumerConfig.configDef().defaultValues()) + "}");
    }

    private static String defaultsOf(Map<String, Object> values) {
        StringBuilder sb = new StringBuilder("{");
        boolean first = true;
        for (Map.Entry<String, Object> e : new TreeMap<>(values).entrySet()) {
            sb.append(first ? "" : ",").append(str(e.getKey())).append(':').append(json(e.getValue()));
            first = false;
        }
        return sb.append('}').toString();
    }

    // -- partition-for ---------------------------------------------------------------------------
    private static void partitionFor(int partitions) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = unhex(line);
            // Java's producer: keyed records -> partitionForKey; null keys -> the sticky partition.
            out.append(key == null ? "null" : Integer.toString(BuiltInPartitioner.partitionForKey(key, partitions)))
                    .append('\n');
        }
        OUT.print(out);
        OUT.flush();
    }

    // -- produce ---------------------------------------------------------------------------------
    private static void produce(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        List<byte[]> keys = new ArrayList<>();
        if (o.has("keys-from-stdin")) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                keys.add(unhex(line));
            }
        } else {
            int count = Integer.parseInt(o.get("count", "100"));
            for (int i = 0; i < count; i++) {
                keys.add(("k-" + i).getBytes(StandardCharsets.UTF_8));
            }
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, o.get("compression", "none"));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        String txnId = o.get("transactional-id", null);
        if (txnId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        }
        int txnSize = Integer.parseInt(o.get("txn-size", "10"));
        String pattern = o.get("txn-pattern", "c");
        Integer partition = o.has("partition") ? Integer.valueOf(o.get("partition", "0")) : null;
        Long tsBase = o.has("timestamp-base") ? Long.valueOf(o.get("timestamp-base", "0")) : null;
        boolean headers = o.has("headers");
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        List<String> txnOf = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            if (txnId != null) {
                producer.initTransactions();
            }
            int txnIndex = 0;
            for (int i = 0; i < keys.size(); i++) {
                String outcome = null;
                if (txnId != null) {
                    if (i % txnSize == 0) {
                        producer.beginTransaction();
                    }
                    outcome = pattern.charAt(txnIndex % pattern.length()) == 'a' ? "abort" : "commit";
                }
                RecordHeaders hs = new RecordHeaders();
                if (headers) {
                    hs.add("h-index", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                    hs.add("h-null", null);
                    hs.add("h-bin", new byte[] {0, (byte) 255, (byte) (i % 256)});
                }
                byte[] value = ("v-" + i).getBytes(StandardCharsets.UTF_8);
                futures.add(producer.send(new ProducerRecord<>(topic, partition, tsBase == null ? null : tsBase + i,
                        keys.get(i), value, hs)));
                txnOf.add(outcome);
                if (txnId != null && (i % txnSize == txnSize - 1 || i == keys.size() - 1)) {
                    // flush first: aborted records are then in the log (marked aborted), not
                    // dropped unsent by the producer, so readers must filter them
                    producer.flush();
                    if (outcome.equals("abort")) {
                        producer.abortTransaction();
                    } else {
                        producer.commitTransaction();
                    }
                    txnIndex++;
                }
            }
            producer.flush();
            for (int i = 0; i < futures.size(); i++) {
                String outcome = txnOf.get(i);
                RecordMetadata md;
                try {
                    md = futures.get(i).get();
                } catch (java.util.concurrent.ExecutionException e) {
                    if (!"abort".equals(outcome)) {
                        throw e;
                    }
                    md = null; // a record of an aborted transaction may fail with TransactionAbortedException
                }
                emit("{\"event\":\"sent\",\"i\":" + i + ",\"key\":" + hex(keys.get(i)) + ",\"partition\":"
                        + (md == null ? "null" : md.partition()) + ",\"offset\":" + (md == null ? "null" : md.offset())
                        + ",\"timestamp\":" + (md == null ? "null" : md.timestamp()) + ",\"txn\":"
                        + (outcome == null ? "null" : str(outcome)) + "}");
            }
        }
    }

    // -- consume ---------------------------------------------------------------------------------
    private static int consume(Opts o) {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, o.get("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        long deadline = System.nanoTime() + (long) (Double.parseDouble(o.get("timeout", "30")) * 1e9);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps); // read_committed: the last stable offsets
            int count = 0;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    emit("{\"event\":\"timeout\",\"count\":" + count + "}");
                    return 3;
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (r.offset() < end.get(new TopicPartition(r.topic(), r.partition()))) {
                        emit(recordJson("record", r, null));
                        count++;
                    }
                }
            }
            emit("{\"event\":\"end\",\"count\":" + count + "}");
            return 0;
        }
    }

    // -- group -----------------------------------------------------------------------------------
    private static String tps(Collection<TopicPartition> parts) {
        StringBuilder sb = new StringBuilder("[");
        boolean first = true;
        for (TopicPartition tp : parts) {
            sb.append(first ? "" : ",").append(tp.partition());
            first = false;
        }
        return sb.append(']').toString();
    }

    private static void group(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        String groupId = o.pos(3, "GROUP");
        String member = o.get("member", "java");
        String protocol = o.get("protocol", "classic");
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, o.get("max-poll-records", "100"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        if (protocol.equals("classic")) {
            String assignor = o.get("assignor", "cooperative-sticky");
            if (!assignor.equals("default")) { // default: Java's own list (range, cooperative-sticky)
                p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(assignor));
            }
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, o.get("session-timeout-ms", "6000"));
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        AtomicBoolean stop = new AtomicBoolean(false);
        CountDownLatch closed = new CountDownLatch(1);
        Runnable requestStop = () -> {
            stop.set(true);
            c.wakeup();
        };
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            requestStop.run();
            try {
                closed.await();
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
        }));
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // drain until EOF
                }
            } catch (java.io.IOException ignored) {
                // EOF or closed: stop as well
            }
            requestStop.run();
        });
        stdin.setDaemon(true);
        stdin.start();
        try {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    emit("{\"event\":\"revoked\",\"member\":" + str(member) + ",\"partitions\":" + tps(parts) + "}");
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    emit("{\"event\":\"assigned\",\"member\":" + str(member) + ",\"partitions\":" + tps(parts) + "}");
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    emit("{\"event\":\"lost\",\"member\":" + str(member) + ",\"partitions\":" + tps(parts) + "}");
                }
            });
            emit("{\"event\":\"started\",\"member\":" + str(member) + "}");
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> records;
                try {
                    records = c.poll(Duration.ofMillis(200));
                } catch (WakeupException e) {
                    break;
                }
                if (records.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    emit(recordJson("record", r, member)); // processing = reporting the record
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                try {
                    c.commitSync(offsets);
                } catch (WakeupException e) {
                    c.commitSync(offsets);
                    stop.set(true);
                } catch (org.apache.kafka.common.KafkaException e) {
                    emit("{\"event\":\"commit_failed\",\"member\":" + str(member) + ",\"error\":" + str(e.toString())
                            + "}");
                    continue;
                }
                StringBuilder sb = new StringBuilder("{");
                boolean first = true;
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    sb.append(first ? "" : ",").append('"').append(e.getKey().partition()).append("\":")
                            .append(e.getValue().offset());
                    first = false;
                }
                emit("{\"event\":\"committed\",\"member\":" + str(member) + ",\"offsets\":" + sb.append('}') + "}");
            }
        } finally {
            emit("{\"event\":\"closed\",\"member\":" + str(member) + "}");
            c.close(Duration.ofSeconds(10));
            OUT.flush();
            closed.countDown();
        }
    }

    // -- lag ---------------------------------------------------------------------------------------
    private static void lag(Opts o) throws Exception {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, o.pos(1, "BOOTSTRAP"));
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, o.get("isolation", "read_uncommitted"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, o.get("max-poll-records", "500"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        TopicPartition tp = new TopicPartition(o.pos(2, "TOPIC"), 0);
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.assign(List.of(tp));
            c.seek(tp, 0);
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (c.poll(Duration.ofMillis(200)).isEmpty() && System.nanoTime() < deadline) {
                // until the first records
            }
            java.util.OptionalLong lag = c.currentLag(tp);
            while (lag.isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(50);
                lag = c.currentLag(tp);
            }
            emit("{\"position\":" + c.position(tp) + ",\"lag\":" + (lag.isPresent() ? lag.getAsLong() : "null")
                    + "}");
        }
    }

    // -- issue #26 rows of bench/java_bench.py: poll latency, fairness, KIP-62 gap, stalled memory --
    private static KafkaConsumer<byte[], byte[]> assignedFromZero(String bootstrap, String topic, String maxPoll) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, maxPoll);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
            tps.add(new TopicPartition(topic, pi.partition()));
        }
        tps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
        c.assign(tps);
        for (TopicPartition tp : tps) {
            c.seek(tp, 0);
        }
        return c;
    }

    private static long touch(ConsumerRecords<byte[], byte[]> records) {
        long n = 0;
        for (ConsumerRecord<byte[], byte[]> r : records) {
            byte[] v = r.value(); // touch every value, as the Python clients do
            n += v == null ? 0 : 1;
        }
        return records.count() + (n < 0 ? 1 : 0);
    }

    private static double pct(List<Long> sortedNanos, double q) {
        int i = Math.min(sortedNanos.size() - 1, (int) (sortedNanos.size() * q));
        return sortedNanos.get(i) / 1e3;
    }

    private static void pollLatency(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        long want = Long.parseLong(o.pos(3, "N"));
        int rounds = Integer.parseInt(o.get("rounds", "10"));
        long pauseMs = Long.parseLong(o.get("pause-ms", "1000"));
        int perRound = (int) Math.max(1, Math.min(100, want / (rounds * 500L) - 1));
        long warm = Math.min(want, Long.parseLong(o.get("warmup-records", "20000")));
        try (KafkaConsumer<byte[], byte[]> c = assignedFromZero(bootstrap, topic, "500")) {
            long n = 0; // untimed: loads the classes and warms the JIT up
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (n < warm && System.nanoTime() < deadline) {
                n += touch(c.poll(Duration.ofMillis(500)));
            }
        }
        List<Long> lat = new ArrayList<>();
        long got = 0;
        try (KafkaConsumer<byte[], byte[]> c = assignedFromZero(bootstrap, topic, "500")) {
            // Java's classic consumer fetches only inside poll(): one untimed poll starts its fetching
            // (the Python clients' fetch threads start on assign), then it fetches ahead between polls.
            got += touch(c.poll(Duration.ofSeconds(1)));
            for (int round = 0; round < rounds; round++) {
                Thread.sleep(pauseMs);
                for (int k = 0; k < perRound; k++) {
                    long s = System.nanoTime();
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofSeconds(1));
                    lat.add(System.nanoTime() - s);
                    got += touch(records);
                }
            }
        }
        List<Long> first = new ArrayList<>();
        for (int i = 0; i < lat.size(); i += perRound) {
            first.add(lat.get(i));
        }
        java.util.Collections.sort(lat);
        java.util.Collections.sort(first);
        emit("{\"records\":" + got + ",\"polls\":" + lat.size() + ",\"buffered_p50_us\":" + pct(lat, 0.5)
                + ",\"buffered_p99_us\":" + pct(lat, 0.99) + ",\"buffered_max_us\":" + lat.get(lat.size() - 1) / 1e3
                + ",\"first_p50_us\":" + pct(first, 0.5) + ",\"first_max_us\":" + first.get(first.size() - 1) / 1e3
                + "}");
    }

    private static void fairness(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        String[] parts = o.pos(3, "COUNTS").split(",");
        long total = 0;
        for (String x : parts) {
            total += Long.parseLong(x);
        }
        StringBuilder timeline = new StringBuilder("[");
        try (KafkaConsumer<byte[], byte[]> c = assignedFromZero(bootstrap, topic, o.get("max-poll-records", "500"))) {
            Thread.sleep((long) (Double.parseDouble(o.get("settle", "1")) * 1000));
            long got = 0;
            boolean firstPoll = true;
            long deadline = System.nanoTime() + 300_000_000_000L;
            while (got < total && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                timeline.append(firstPoll ? "[" : ",[");
                firstPoll = false;
                for (int i = 0; i < parts.length; i++) {
                    int k = records.records(new TopicPartition(topic, i)).size();
                    timeline.append(i == 0 ? "" : ",").append(k);
                    got += k;
                }
                timeline.append(']');
            }
        }
        emit("{\"timeline\":" + timeline.append(']') + "}");
    }

    private static void pollGap(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        String groupId = o.pos(3, "GROUP");
        long total = Long.parseLong(o.pos(4, "TOTAL"));
        long gapMs = Long.parseLong(o.get("gap-ms", "5000"));
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, o.get("max-poll-records", "100"));
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, o.get("max-poll-interval-ms", "6000"));
        p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, o.get("session-timeout-ms", "6000"));
        p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        List<String> events = java.util.Collections.synchronizedList(new ArrayList<>());
        long[] gapStart = {System.nanoTime()};
        java.util.function.BiConsumer<String, Collection<TopicPartition>> event = (name, parts) -> events.add(
                "{\"event\":" + str(name) + ",\"t\":" + (System.nanoTime() - gapStart[0]) / 1e9 + ",\"partitions\":"
                        + tps(parts) + "}");
        java.util.Set<String> seen = new java.util.HashSet<>();
        long duplicates = 0;
        long got = 0;
        int commitFailures = 0;
        double recordsAfter = -1;
        String seenEvents;
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    event.accept("revoked", parts);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    event.accept("assigned", parts);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> parts) {
                    event.accept("lost", parts);
                }
            });
            long deadline = System.nanoTime() + 60_000_000_000L;
            boolean gapDone = false;
            while (got < total && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (!seen.add(r.partition() + ":" + r.offset())) {
                        duplicates++;
                    }
                    got++;
                }
                if (gapDone && recordsAfter < 0) {
                    recordsAfter = (System.nanoTime() - gapStart[0]) / 1e9 - gapMs / 1e3;
                }
                try {
                    c.commitSync();
                } catch (org.apache.kafka.common.KafkaException e) {
                    commitFailures++;
                }
                if (!gapDone) { // the processing gap, after the first records and their commit
                    gapStart[0] = System.nanoTime();
                    events.clear();
                    Thread.sleep(gapMs);
                    gapDone = true;
                    deadline = System.nanoTime() + 60_000_000_000L;
                }
            }
            seenEvents = events.toString(); // before close(): its revoke is a wanted leave, not the gap's
        }
        emit("{\"gap_s\":" + gapMs / 1e3 + ",\"records\":" + got + ",\"duplicates\":" + duplicates
                + ",\"records_after_gap_s\":" + (recordsAfter < 0 ? "null" : Double.toString(recordsAfter))
                + ",\"commit_failures\":" + commitFailures + ",\"events\":" + seenEvents + "}");
    }

    private static void stall(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        double seconds = Double.parseDouble(o.get("stall", "10"));
        try (KafkaConsumer<byte[], byte[]> c = assignedFromZero(bootstrap, topic, "500")) {
            long got = 0;
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (got == 0 && System.nanoTime() < deadline) {
                got = touch(c.poll(Duration.ofMillis(100)));
            }
            emit("{\"event\":\"stall_start\",\"records\":" + got + "}");
            Thread.sleep((long) (seconds * 1000)); // the application stops polling
            emit("{\"event\":\"stall_end\"}");
        }
    }

    // -- benchmarks (bench/java_bench.py) ---------------------------------------------------------
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory
                .getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static void benchResult(long records, long t0, long c0) {
        double seconds = (System.nanoTime() - t0) / 1e9;
        double cpu = (cpuNanos() - c0) / 1e9;
        emit("{\"records\":" + records + ",\"seconds\":" + seconds + ",\"cpu_seconds\":" + cpu + "}");
    }

    private static void consumeBench(Opts o) {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        long want = Long.parseLong(o.pos(3, "N"));
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, o.get("max-poll-records", "500"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        int passes = Integer.parseInt(o.get("passes", "2"));
        // One consumer per pass, in one JVM: the last pass is reported, with the JIT warmed up (a
        // reused consumer would first wait out the previous pass's fetch parked at the log end).
        for (int pass = 1; pass <= passes; pass++) {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
                List<TopicPartition> tps = new ArrayList<>();
                for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                    tps.add(new TopicPartition(topic, pi.partition()));
                }
                c.assign(tps);
                for (TopicPartition tp : tps) {
                    c.seek(tp, 0);
                }
                long t0 = System.nanoTime();
                long c0 = cpuNanos();
                long tFirst = 0;
                long cFirst = 0;
                long n = 0;
                long bytes = 0;
                while (n < want) {
                    long s = System.nanoTime();
                    long cs = tFirst == 0 ? cpuNanos() : 0; // only until the first record
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(500));
                    if (tFirst == 0 && !records.isEmpty()) {
                        tFirst = s; // as the Python workers: from the start of the first poll that returns records
                        cFirst = cs;
                    }
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        byte[] v = r.value(); // touch every value, as the Python clients do
                        bytes += v == null ? 0 : v.length;
                        n++;
                    }
                }
                if (pass == passes) {
                    long tEnd = System.nanoTime();
                    long cEnd = cpuNanos();
                    double seconds = (tEnd - t0) / 1e9;
                    double cpu = (cEnd - c0) / 1e9;
                    double fromFirst = (tEnd - tFirst) / 1e9;
                    double cpuFromFirst = (cEnd - cFirst) / 1e9;
                    emit("{\"records\":" + n + ",\"seconds\":" + seconds + ",\"cpu_seconds\":" + cpu
                            + ",\"seconds_from_first\":" + fromFirst + ",\"cpu_seconds_from_first\":"
                            + cpuFromFirst + "}");
                }
                if (bytes < 0) {
                    System.err.println(bytes);
                }
            }
        }
    }

    private static void produceBench(Opts o) throws Exception {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        long n = Long.parseLong(o.pos(3, "N"));
        byte[] value = new byte[Integer.parseInt(o.get("value-size", "100"))];
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, o.get("acks", "all"));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.partitionsFor(topic); // metadata first: not timed
            int passes = Integer.parseInt(o.get("passes", "2"));
            for (int pass = 1; pass <= passes; pass++) { // the last pass is reported: JIT warmed up
                long t0 = System.nanoTime();
                long c0 = cpuNanos();
                for (long i = 0; i < n; i++) {
                    producer.send(
                            new ProducerRecord<>(topic, Long.toString(i).getBytes(StandardCharsets.UTF_8), value));
                }
                producer.flush();
                if (pass == passes) {
                    benchResult(n, t0, c0);
                }
            }
        }
    }

    // -- share-bench (bench/share_bench.py, issue #30) ---------------------------------------------
    private static void shareBench(Opts o) {
        String bootstrap = o.pos(1, "BOOTSTRAP");
        String topic = o.pos(2, "TOPIC");
        long want = Long.parseLong(o.pos(3, "N"));
        String[] groups = o.get("groups", "share-bench").split(",");
        for (int pass = 0; pass < groups.length; pass++) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, groups[pass]);
            p.put("share.acknowledgement.mode", "implicit");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, o.get("max-poll-records", "500"));
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            long t0 = 0;
            long c0 = 0;
            long n = 0;
            long bytes = 0;
            org.apache.kafka.clients.consumer.KafkaShareConsumer<byte[], byte[]> c =
                    new org.apache.kafka.clients.consumer.KafkaShareConsumer<>(p);
            try {
                c.subscribe(List.of(topic));
                while (n < want) {
                    ConsumerRecords<byte[], byte[]> batch = c.poll(Duration.ofMillis(1000));
                    if (n == 0 && !batch.isEmpty()) { // joining the group is not the client's speed
                        t0 = System.nanoTime();
                        c0 = cpuNanos();
                    }
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        byte[] v = r.value(); // touch every value, as the Python clients do
                        bytes += v == null ? 0 : v.length;
                        n++;
                    }
                }
            } finally {
                c.close(); // sends the last poll's acknowledgements, as the Python clients' close()
            }
            if (pass == groups.length - 1) {
                benchResult(n, t0, c0);
            }
            if (bytes < 0) {
                System.err.println(bytes);
            }
        }
    }

    private static String assignorClass(String name) {
        return switch (name) {
            case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin" -> "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "cooperative-sticky" -> "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default -> name;
        };
    }

    private KafkaPeer() {}
}

#!/bin/bash
# Entry point of localhost/magnetar-spark (tini runs it as PID 1's child). Spark on Kubernetes
# (spark-submit --master k8s://..., or the spark-operator's SparkApplication) starts the driver pod
# with `driver <spark-submit args>` and executor pods with `executor` plus SPARK_* variables, the
# contract of Spark's own images; anything else runs as given (`python3 job.py`, `spark-submit ...`).
set -euo pipefail
case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ...: the executor's JVM options, in order.
    readarray -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*${SPARK_EXTRA_CLASSPATH:+:$SPARK_EXTRA_CLASSPATH}"
    exec "$JAVA_HOME/bin/java" "${java_opts[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  *)
    exec "$@"
    ;;
esac

